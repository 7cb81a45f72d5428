//! The job format: builder → parser round trip, one test per parse rule,
//! reports, and random bytes never panicking the parser.

use dvm_isa::job::{
    parse_report, Job, JobBuilder, JobError, ReportError, Status, BUF_OUTPUT, HEADER_BYTES,
    JOB_ALIGN,
};
use proptest::prelude::*;

fn sample() -> Vec<u8> {
    let mut j = JobBuilder::new();
    let m0 = j.module(b"DVMBmodule-zero");
    let m1 = j.module(&[7u8; 100]);
    let a = j.buffer(vec![1; 10], false);
    let b = j.buffer(vec![2; 64], true);
    j.launch(m0, 0, &[a, b], 2);
    j.launch(m1, 3, &[b], 1);
    j.finish()
}

#[test]
fn built_jobs_parse_back() {
    let bytes = sample();
    let job = Job::parse(&bytes).unwrap();
    assert_eq!(job.module_count(), 2);
    assert_eq!(job.module(0).unwrap(), b"DVMBmodule-zero");
    assert_eq!(job.module(1).unwrap(), &[7u8; 100][..]);
    assert_eq!(job.module(2), None);
    let bufs = job.buffers();
    assert_eq!(bufs.len(), 2);
    assert_eq!(bufs[1].flags.get(), BUF_OUTPUT);
    for b in bufs {
        assert_eq!(b.offset.get() % JOB_ALIGN as u64, 0);
    }
    let off = bufs[1].offset.get() as usize;
    assert_eq!(&bytes[off..off + 64], &[2u8; 64][..]);
    let l = job.launches();
    assert_eq!(l.len(), 2);
    assert_eq!(job.args(&l[0]).collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(job.args(&l[1]).collect::<Vec<_>>(), vec![1]);
    assert_eq!((l[1].module.get(), l[1].kernel.get()), (1, 3));
}

fn set_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn set_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

// Table offsets of `sample()`: 2 modules (16 B each), 2 buffers (24 B each), launches (24 B each).
const MODULES: usize = HEADER_BYTES;
const BUFFERS: usize = MODULES + 2 * 16;
const LAUNCHES: usize = BUFFERS + 2 * 24;

#[test]
fn each_rule_is_enforced() {
    let good = sample();
    let check = |f: &dyn Fn(&mut Vec<u8>), want: JobError| {
        let mut b = good.clone();
        f(&mut b);
        assert_eq!(Job::parse(&b).unwrap_err(), want);
    };
    check(&|b| b.truncate(20), JobError::Truncated);
    check(&|b| b[0] = b'X', JobError::BadMagic);
    check(&|b| b[4] = 9, JobError::BadVersion(9));
    check(&|b| b[6] = 1, JobError::Reserved);
    check(
        &|b| {
            let n = b.len();
            b.truncate(n - 1)
        },
        JobError::Truncated,
    );
    check(&|b| set_u32(b, 16, 1_000_000), JobError::Tables);
    check(
        &|b| set_u64(b, MODULES, 8),
        JobError::Range {
            what: "module",
            index: 0,
        },
    );
    check(
        &|b| set_u64(b, MODULES + 8, u64::MAX),
        JobError::Range {
            what: "module",
            index: 0,
        },
    );
    check(
        &|b| {
            let o = u64::from_le_bytes(b[BUFFERS..BUFFERS + 8].try_into().unwrap());
            set_u64(b, BUFFERS, o + 4)
        },
        JobError::Range {
            what: "buffer",
            index: 0,
        },
    );
    check(
        &|b| {
            let o = u64::from_le_bytes(b[BUFFERS..BUFFERS + 8].try_into().unwrap());
            set_u64(b, BUFFERS + 24, o)
        },
        JobError::Overlap(1),
    );
    check(
        &|b| {
            let o = u64::from_le_bytes(b[MODULES..MODULES + 8].try_into().unwrap());
            set_u64(b, BUFFERS, o)
        },
        JobError::Overlap(0),
    );
    check(&|b| set_u32(b, BUFFERS + 16, 2), JobError::Reserved);
    check(&|b| set_u32(b, LAUNCHES + 12, 50), JobError::Args(0));
    let args = LAUNCHES + 2 * 24;
    check(&|b| set_u32(b, args, 2), JobError::Args(0));
}

#[test]
fn reports_parse_and_reject_garbage() {
    use dvm_isa::job::{LaunchReport, OutputHeader, ReportHeader, JOB_VERSION, REPORT_MAGIC};
    use zerocopy::IntoBytes;
    let h = ReportHeader {
        magic: REPORT_MAGIC,
        version: JOB_VERSION.into(),
        cores: 2.into(),
        status: 0.into(),
        failed_launch: u32::MAX.into(),
        detail: 0.into(),
        launches: 1.into(),
        outputs: 1.into(),
    };
    let mut r = h.as_bytes().to_vec();
    r.extend_from_slice(
        LaunchReport {
            tiles: 3.into(),
            instrs: 12.into(),
            core_mask: 3.into(),
        }
        .as_bytes(),
    );
    r.extend_from_slice(
        OutputHeader {
            buffer: 4.into(),
            reserved: 0.into(),
            len: 3.into(),
        }
        .as_bytes(),
    );
    r.extend_from_slice(&[1, 2, 3, 0, 0, 0, 0, 0]);
    let rep = parse_report(&r).unwrap();
    assert_eq!(rep.status, Status::Ok);
    assert_eq!(rep.failed_launch, None);
    assert_eq!(rep.launches[0].instrs.get(), 12);
    assert_eq!(rep.launches[0].core_mask.get(), 3);
    assert_eq!(rep.cores, 2);
    assert_eq!(rep.outputs, vec![(4, vec![1, 2, 3])]);
    assert_eq!(
        parse_report(&r[..r.len() - 6]).unwrap_err(),
        ReportError::Truncated
    );
    let mut bad = r.clone();
    bad[8] = 77;
    assert_eq!(parse_report(&bad).unwrap_err(), ReportError::BadStatus(77));
    bad[0] = 0;
    assert_eq!(parse_report(&bad).unwrap_err(), ReportError::BadMagic);
    for code in [0u32, 1, 2, 3, 4, 5, 6, 7, 8, 100, 101, 102] {
        let s = Status::from_u32(code).unwrap();
        assert_eq!(s as u32, code);
        assert!(!s.describe().is_empty());
    }
    assert_eq!(Status::from_u32(9), None);
}

proptest! {
    #[test]
    fn random_and_mutated_jobs_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
    ) {
        let _ = Job::parse(&bytes);
        let _ = parse_report(&bytes);
        let mut j = sample();
        for (at, v) in flips {
            let n = j.len();
            j[at % n] = v;
        }
        if let Ok(job) = Job::parse(&j) {
            for l in job.launches() {
                for a in job.args(l) {
                    prop_assert!(a < job.buffers().len());
                }
            }
            for i in 0..job.module_count() {
                prop_assert!(job.module(i).is_some());
            }
        }
    }
}

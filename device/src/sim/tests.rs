//! The simulator's contracts on kernels written in assembly: determinism,
//! monotonicity in bytes and work, overlap allowed by the wait flags, the
//! UB limit and the spec's checks.

extern crate alloc;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use dvm_isa::{verify_kernel, DeviceLimits, Module, Pipe};

use super::*;

/// A kernel over `n` f32 elements in tiles of 256: load, `ops` vector
/// instructions, store; the load waits for `load_wait` (`""` for none).
fn kernel(n: u32, ops: &[&str], load_wait: &str) -> Vec<u8> {
    let tiles = n.div_ceil(256);
    let mut body = String::new();
    for (i, op) in ops.iter().enumerate() {
        // Later vector ops follow in their pipe's order.
        let wait = if i == 0 { " @wait=load" } else { "" };
        body.push_str(&format!("    {op} dt=f32 dst=0 src=0 n=256{wait}\n"));
    }
    let lw = if load_wait.is_empty() {
        String::new()
    } else {
        format!(" @wait={load_wait}")
    };
    let text = format!(
        ".kernel \"k\" kind=vector ub=4096\n\
         \x20 .param \"x\" f32 in dims=[{n}]\n\
         \x20 .param \"y\" f32 out dims=[{n}]\n\
         \x20 .body grid=1,1,{tiles}\n\
         \x20   load dt=f32 pad=fill buf=0 row_dim=- col_dim=2 ub=0 pitch=256 rows=1 cols=256 row_total=1 col_total={n} padv=0.0 base=0 step0=0 step1=0 step2=256 row_stride=0 col_stride=1{lw}\n\
         {body}\
         \x20   store dt=f32 buf=1 row_dim=- col_dim=2 ub=0 pitch=256 rows=1 cols=256 row_total=1 col_total={n} base=0 step0=0 step1=0 step2=256 row_stride=0 col_stride=1 @wait=vector\n\
         \x20   end\n\
         .end\n"
    );
    dvm_isa::asm::assemble(&text).expect("the test kernel assembles")
}

/// Simulates the module's kernel on `spec`.
fn run(bytes: &[u8], spec: &DeviceSpec) -> Result<SimStats, SimError> {
    let m = Module::parse(bytes).expect("parses");
    let v = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).expect("verifies");
    let p: SimProgram = SimProgram::new(&v).expect("fits");
    let mut sim = alloc::boxed::Box::new(Simulator::new());
    sim.launch(spec, &p, &mut NoSink)
}

fn cycles(bytes: &[u8], spec: &DeviceSpec) -> u64 {
    run(bytes, spec).expect("simulates").cycles
}

#[test]
fn cycle_counts_are_deterministic() {
    let k = kernel(100_000, &["exp", "neg"], "");
    let a = run(&k, &DeviceSpec::ASCEND_910B).unwrap();
    let b = run(&k, &DeviceSpec::ASCEND_910B).unwrap();
    assert_eq!(a, b);
    assert!(a.cycles > 0);
    assert_eq!(a.tiles, 100_000u64.div_ceil(256));
    assert_eq!(a.instrs, a.tiles * 4);
    assert_eq!(a.bytes_loaded, 400_000);
    assert_eq!(a.bytes_stored, 400_000);
}

#[test]
fn cycles_grow_with_bytes() {
    for spec in [DeviceSpec::ASCEND_910B, DeviceSpec::GENERIC_CPU] {
        let mut last = 0;
        for n in [256, 1000, 10_000, 100_000, 1_000_000] {
            let c = cycles(&kernel(n, &["neg"], ""), &spec);
            assert!(c >= last, "{n} elements: {c} cycles after {last}");
            last = c;
        }
    }
}

#[test]
fn cycles_grow_with_work() {
    for spec in [DeviceSpec::ASCEND_910B, DeviceSpec::GENERIC_CPU] {
        let one = cycles(&kernel(50_000, &["neg"], ""), &spec);
        let two = cycles(&kernel(50_000, &["neg", "exp"], ""), &spec);
        let three = cycles(&kernel(50_000, &["neg", "exp", "exp"], ""), &spec);
        assert!(one <= two && two <= three, "{one} {two} {three}");
        assert!(one < three);
    }
}

#[test]
fn overlap_allowed_by_the_flags_is_faster_than_the_serialised_stream() {
    let spec = DeviceSpec {
        cores: 1,
        ..DeviceSpec::ASCEND_910B
    };
    let overlapped = run(&kernel(200_000, &["exp"], ""), &spec).unwrap();
    // The next tile's load waits for the store before it: no overlap.
    let serial = run(&kernel(200_000, &["exp"], "store"), &spec).unwrap();
    assert!(
        overlapped.cycles < serial.cycles,
        "{} vs {}",
        overlapped.cycles,
        serial.cycles
    );
    assert!(serial.stalls.flag > overlapped.stalls.flag);
    // A serial spec runs both the same.
    let cpu = DeviceSpec {
        cores: 1,
        ..DeviceSpec::GENERIC_CPU
    };
    assert_eq!(
        cycles(&kernel(20_000, &["exp"], ""), &cpu),
        cycles(&kernel(20_000, &["exp"], "store"), &cpu)
    );
}

#[test]
fn more_cores_are_not_slower_and_share_the_bandwidth() {
    let k = kernel(1_000_000, &["neg"], "");
    let mut last = u64::MAX;
    for cores in [1, 2, 8, 24] {
        let spec = DeviceSpec {
            cores,
            ..DeviceSpec::ASCEND_910B
        };
        let s = run(&k, &spec).unwrap();
        assert!(s.cycles <= last, "{cores} cores: {} after {last}", s.cycles);
        last = s.cycles;
        if cores == 24 {
            // 24 cores at 128 B/cycle ask for more than the shared 1000.
            assert!(s.stalls.bandwidth > 0);
            assert_eq!(s.critical_pipe(), Pipe::Load);
        }
    }
}

#[test]
fn a_kernel_larger_than_the_ub_is_refused() {
    let spec = DeviceSpec {
        ub_bytes: 1024,
        ..DeviceSpec::ASCEND_910B
    };
    let e = run(&kernel(1000, &["neg"], ""), &spec).unwrap_err();
    assert_eq!(
        e,
        SimError::Ub {
            need: 4096,
            have: 1024
        }
    );
}

#[test]
fn bad_specs_are_refused_naming_the_field() {
    let bad = [
        (
            DeviceSpec {
                cores: 0,
                ..DeviceSpec::ASCEND_910B
            },
            "cores",
        ),
        (
            DeviceSpec {
                clock_hz: f64::NAN,
                ..DeviceSpec::ASCEND_910B
            },
            "clock_hz",
        ),
        (
            DeviceSpec {
                ub_bytes: 100,
                ..DeviceSpec::ASCEND_910B
            },
            "ub_bytes",
        ),
        (
            DeviceSpec {
                gm_bytes_per_cycle: 0.0,
                ..DeviceSpec::ASCEND_910B
            },
            "gm_bytes_per_cycle",
        ),
        (
            DeviceSpec {
                queue_depth: 0,
                ..DeviceSpec::ASCEND_910B
            },
            "queue_depth",
        ),
        (
            DeviceSpec {
                cube_macs: [1.0, -1.0, 1.0],
                ..DeviceSpec::ASCEND_910B
            },
            "cube_macs",
        ),
    ];
    for (spec, field) in bad {
        let e = run(&kernel(1000, &["neg"], ""), &spec).unwrap_err();
        assert_eq!(e, SimError::Spec(spec.check().unwrap_err()));
        assert_eq!(spec.check().unwrap_err().field, field);
    }
    assert!(DeviceSpec::ASCEND_910B.check().is_ok());
    assert!(DeviceSpec::GENERIC_CPU.check().is_ok());
}

#[test]
fn the_shared_channel_never_beats_the_core_rate() {
    let mut ch = channel::Channel::new(100.0);
    let (end, lost) = ch.transfer(0, 6400, 64.0);
    assert_eq!((end, lost), (100, 0));
    // A second transfer at once finds the first slots partly taken.
    let (end2, lost2) = ch.transfer(0, 6400, 64.0);
    assert!(end2 > 100 && lost2 == end2 - 100, "{end2} {lost2}");
}

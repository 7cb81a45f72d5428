//! Structure-aware: the compiler's own modules, mutated at the field level
//! (an operand of an instruction set to a boundary or arbitrary value, a
//! bit of a head word flipped), then verified and, when they verify, run
//! on guard-paged buffers. Random bytes rarely get past the parser; these
//! get past it every time and probe the verifier rule by rule.
#![no_main]

use std::sync::OnceLock;

use dvm_isa::{Instr, Module};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

fn seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| dvm_fuzz::seeds::compiled_modules(&[1, 5, 17, 64]))
}

/// An instruction of the module: byte offset of its head word, and the
/// byte offset and width of each operand field.
struct Site {
    head: usize,
    fields: Vec<(usize, u32, u32)>,
}

/// The instructions of every body of every kernel of `bytes`.
fn sites(bytes: &[u8]) -> Vec<Site> {
    let Ok(m) = Module::parse(bytes) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for k in 0..m.kernel_count() {
        let Some(kernel) = m.kernel(k) else { continue };
        for b in 0..kernel.bodies.len() {
            let Some(code) = kernel.body_code(b) else {
                continue;
            };
            let base = code.as_ptr() as usize - bytes.as_ptr() as usize;
            let mut at = 0;
            while let Ok((head, instr)) = Instr::decode(&code[at..]) {
                let mut bit = dvm_isa::word::OPERAND_BIT0;
                let fields = instr
                    .opcode()
                    .operands()
                    .iter()
                    .map(|f| {
                        bit = bit.next_multiple_of(f.bits);
                        let field = (base + 8 * at + (bit / 64) as usize * 8, bit % 64, f.bits);
                        bit += f.bits;
                        field
                    })
                    .collect();
                out.push(Site {
                    head: base + 8 * at,
                    fields,
                });
                at += head.len as usize;
                if at >= code.len() {
                    break;
                }
            }
        }
    }
    out
}

fn interesting(u: &mut Unstructured<'_>, old: u64, bits: u32) -> Result<u64> {
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let v = match u.int_in_range(0..=9u8)? {
        0 => 0,
        1 => 1,
        2 => max,
        3 => max >> 1,
        4 => (max >> 1) + 1,
        5 => old.wrapping_add(1),
        6 => old.wrapping_sub(1),
        7 => old.wrapping_mul(2),
        8 => old ^ (1 << u.int_in_range(0..=bits - 1)?),
        _ => u.arbitrary()?,
    };
    Ok(v & max)
}

fn mutate(u: &mut Unstructured<'_>) -> Result<()> {
    let seeds = seeds();
    if seeds.is_empty() {
        return Ok(());
    }
    let mut bytes = u.choose(seeds)?.clone();
    for _ in 0..u.int_in_range(1..=3u8)? {
        let sites = sites(&bytes);
        if sites.is_empty() {
            break;
        }
        let site = u.choose(&sites)?;
        if site.fields.is_empty() || u.ratio(1, 5)? {
            // A bit of the head word: opcode, length, pipe, wait flags.
            let bit = u.int_in_range(0..=31u32)?;
            let mut w = u64::from_le_bytes(bytes[site.head..site.head + 8].try_into().unwrap());
            w ^= 1 << bit;
            bytes[site.head..site.head + 8].copy_from_slice(&w.to_le_bytes());
        } else {
            let &(at, shift, width) = u.choose(&site.fields)?;
            let mut w = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
            let mask = if width == 64 {
                u64::MAX
            } else {
                ((1u64 << width) - 1) << shift
            };
            let v = interesting(u, (w & mask) >> shift, width)?;
            w = (w & !mask) | (v << shift);
            bytes[at..at + 8].copy_from_slice(&w.to_le_bytes());
        }
    }
    let fill: Vec<u8> = (0..64).map(|_| u.arbitrary::<u8>().unwrap_or(0)).collect();
    let blocks = u.int_in_range(1..=3u32)?;
    dvm_fuzz::run_module(&bytes, &fill, blocks);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = mutate(&mut Unstructured::new(data));
});

//! Encode → decode → encode for every opcode, generated from the table, and
//! operand text round trips.

use dvm_isa::{Instr, Opcode, Pipe, WaitMask, MAX_INSTR_WORDS};
use proptest::prelude::*;
use zerocopy::little_endian::U64;

fn to_words(words: &[u64]) -> Vec<U64> {
    words.iter().map(|w| U64::new(*w)).collect()
}

fn wait_for(op: Opcode, bits: u64) -> WaitMask {
    if op.pipe() == Pipe::Control {
        return WaitMask::NONE;
    }
    let mut m = WaitMask::NONE;
    for p in Pipe::DATA {
        if p != op.pipe() && bits & (1 << p as u8) != 0 {
            m = m.with(p);
        }
    }
    m
}

#[test]
fn layouts_fit_the_packer() {
    for op in Opcode::ALL {
        assert!((op.len_words() as usize) <= MAX_INSTR_WORDS, "{op:?}");
        assert!(op.len_words() >= 1);
    }
}

#[test]
fn opcodes_and_mnemonics_are_unique() {
    for (i, a) in Opcode::ALL.iter().enumerate() {
        assert_eq!(Opcode::from_u8(*a as u8), Some(*a));
        assert_eq!(Opcode::from_mnemonic(a.mnemonic()), Some(*a));
        for b in &Opcode::ALL[i + 1..] {
            assert_ne!(a.mnemonic(), b.mnemonic());
        }
    }
}

/// The verifier's list of UB accesses is exactly what the table's own walk
/// visits, for every opcode, and its capacity is the longest row.
#[test]
fn ub_access_list_matches_the_table_walk() {
    let mut longest = 0;
    for (i, &op) in Opcode::ALL.iter().enumerate() {
        let mut bits = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1);
        let instr = Instr::sample(op, &mut || {
            bits = bits.rotate_left(13).wrapping_add(0x6a09_e667);
            bits
        });
        let mut walked = Vec::new();
        instr
            .for_each_ub(|a| {
                walked.push(a);
                Ok::<(), ()>(())
            })
            .unwrap();
        assert_eq!(instr.ub_accesses().as_slice(), walked.as_slice(), "{op:?}");
        longest = longest.max(walked.len());
    }
    assert_eq!(dvm_isa::instr::MAX_UB_ACCESSES, longest);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_opcode_round_trips(seed in any::<u64>(), wait_bits in any::<u64>()) {
        let mut state = seed;
        let mut next = move || {
            // splitmix64
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for &op in Opcode::ALL {
            let instr = Instr::sample(op, &mut next);
            let wait = wait_for(op, wait_bits);
            let packed = instr.encode(wait);
            let words = to_words(packed.words());
            prop_assert_eq!(words.len(), op.len_words() as usize);
            let (head, back) = Instr::decode(&words).unwrap();
            prop_assert_eq!(back, instr);
            prop_assert_eq!(head.wait, wait);
            prop_assert_eq!(head.pipe, op.pipe());
            let again = back.encode(wait);
            prop_assert_eq!(again.words(), packed.words());

            let mut text = String::new();
            instr.write_operands(&mut text).unwrap();
            let parsed = Instr::parse_operands(op, &mut text.split_whitespace()).unwrap();
            let reparsed = parsed.encode(wait);
            prop_assert_eq!(reparsed.words(), packed.words(), "{}", text);
        }
    }

    #[test]
    fn decode_never_panics(words in proptest::collection::vec(any::<u64>(), 0..20)) {
        let _ = Instr::decode(&to_words(&words));
    }
}

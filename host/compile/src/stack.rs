//! Stacking: several compiled groups as the bodies of one kernel, so they
//! run in one launch.
//!
//! - **Parallel** ([`KernelKind::Parallel`]): independent groups (e.g. the
//!   q, k, v projections); the executor concatenates their tile ranges and
//!   splits them across the cores, so different cores run different bodies.
//! - **Sequence** ([`KernelKind::Sequence`]): dependent groups as stages;
//!   every core finishes a stage before any starts the next (a barrier), so
//!   a stage reads what the previous one stored.
//!
//! Each member is compiled on its own; its loads and stores are then
//! relinked from the member's parameters to the stacked kernel's, which
//! binds every buffer once (read, written, or both when one stage writes
//! what another reads).

use std::sync::Arc;

use dvm_isa::builder::{BodyDef, CodeWriter, KernelDef, ParamDef};
use dvm_isa::{Instr, KernelKind, ParamAccess};
use zerocopy::little_endian::U64;

use crate::codegen::{compile, CompileError, Compiled, Group, Target};
use crate::kernel::{ready, BuildError, ReadyKernel};
use crate::lower::{Launch, LaunchKind, Plan};

/// Relinks one body: every load and store of member parameter `p` uses
/// stacked parameter `map[p]`.
///
/// # Errors
/// [`CompileError::Malformed`] when the code does not decode or names a
/// parameter outside `map`.
pub fn relink(code: &CodeWriter, map: &[u8]) -> Result<CodeWriter, CompileError> {
    let words: Vec<U64> = code.words().iter().map(|w| U64::new(*w)).collect();
    let mut out = CodeWriter::new();
    let mut at = 0;
    let remap = |b: &mut u8| -> Result<(), CompileError> {
        *b = *map
            .get(*b as usize)
            .ok_or_else(|| CompileError::Malformed(format!("parameter {b} is not mapped")))?;
        Ok(())
    };
    while at < words.len() {
        let (head, mut instr) = Instr::decode(&words[at..])
            .map_err(|e| CompileError::Malformed(format!("stacking: {e}")))?;
        match &mut instr {
            Instr::Load { buf, .. }
            | Instr::Gather { buf, .. }
            | Instr::Store { buf, .. }
            | Instr::StoreAdd { buf, .. } => remap(buf)?,
            other if other.gm().is_some() => {
                return Err(CompileError::Malformed(format!(
                    "stacking: `{}` accesses a parameter relink does not map",
                    other.opcode().mnemonic()
                )))
            }
            _ => {}
        }
        out.push(&instr, head.wait);
        at += head.len as usize;
    }
    Ok(out)
}

/// Combines compiled members into one kernel of `kind`. `maps[i][p]` is the
/// stacked parameter of member `i`'s parameter `p`.
///
/// # Errors
/// [`CompileError`] when the members disagree on a parameter's dtype, a map
/// is inconsistent, or the stack exceeds the parameter limit.
pub fn combine(
    kind: KernelKind,
    name: &str,
    members: &[Compiled],
    maps: &[Vec<u8>],
) -> Result<Compiled, CompileError> {
    if members.len() != maps.len() || members.is_empty() {
        return Err(CompileError::Malformed(
            "stack members and maps differ".into(),
        ));
    }
    let nparams = maps
        .iter()
        .flat_map(|m| m.iter())
        .map(|&p| p as usize + 1)
        .max()
        .unwrap_or(0);
    if nparams > dvm_isa::verify::MAX_PARAMS {
        return Err(CompileError::TooLarge(format!(
            "{nparams} stacked parameters"
        )));
    }
    let mut params: Vec<Option<ParamDef>> = vec![None; nparams];
    let mut bodies = Vec::new();
    let mut ub_bytes = 0;
    let (mut tiles, mut bytes_moved) = (0, 0);
    for (c, map) in members.iter().zip(maps) {
        if map.len() != c.kernel.params.len() {
            return Err(CompileError::Malformed("stack map length".into()));
        }
        for (p, &to) in c.kernel.params.iter().zip(map) {
            let slot = &mut params[to as usize];
            match slot {
                None => {
                    *slot = Some(ParamDef {
                        name: format!("b{to}"),
                        ..p.clone()
                    })
                }
                Some(q) => {
                    if q.dtype != p.dtype {
                        return Err(CompileError::Malformed(format!(
                            "stacked parameter {to} is {} and {}",
                            q.dtype, p.dtype
                        )));
                    }
                    if q.access != p.access {
                        q.access = ParamAccess::ReadWrite;
                    }
                }
            }
        }
        for b in &c.kernel.bodies {
            bodies.push(BodyDef {
                grid: b.grid,
                code: relink(&b.code, map)?,
            });
        }
        ub_bytes = ub_bytes.max(c.kernel.ub_bytes);
        tiles += c.tiles;
        bytes_moved += c.bytes_moved;
    }
    let params = params
        .into_iter()
        .map(|p| p.ok_or_else(|| CompileError::Malformed("a stacked parameter is unused".into())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Compiled {
        kernel: KernelDef {
            name: name.to_string(),
            kind,
            ub_bytes,
            params,
            bodies,
        },
        tile: members[0].tile,
        tiles,
        bytes_moved,
    })
}

/// Compiles `groups` and stacks them into one ready kernel of `kind`.
///
/// # Errors
/// [`BuildError`] from a member's compilation, the combination, or the
/// verifier and predecoder of the stacked kernel (e.g. more bodies or
/// instructions than the executor holds).
pub fn build_stack(
    kind: KernelKind,
    groups: &[&Group],
    maps: &[Vec<u8>],
    name: &str,
    target: &Target,
) -> Result<Arc<ReadyKernel>, BuildError> {
    let members = groups
        .iter()
        .map(|g| compile(g, name, target))
        .collect::<Result<Vec<_>, _>>()?;
    let info = combine(kind, name, &members, maps)?;
    ready(info, target)
}

/// The parameter maps of launch `l`: for each step, where each of its
/// arguments sits in [`Plan::launch_args`].
pub fn launch_maps(plan: &Plan, l: &Launch) -> Option<Vec<Vec<u8>>> {
    let (bufs, _) = plan.launch_args(l);
    l.steps
        .iter()
        .map(|&s| {
            plan.steps[s]
                .args
                .iter()
                .map(|b| {
                    bufs.iter()
                        .position(|x| x == b)
                        .and_then(|i| u8::try_from(i).ok())
                })
                .collect::<Option<Vec<u8>>>()
        })
        .collect()
}

/// When consecutive kernels are packed into sequence launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequencePolicy {
    /// Pack at all.
    pub enabled: bool,
    /// Only kernels of at most this many tiles (small kernels, where the
    /// launch costs as much as the work) become stages.
    pub max_stage_tiles: u64,
    /// Most stages (bodies) per launch.
    pub max_stages: usize,
}

impl SequencePolicy {
    /// The default for `cores` cores: stages of at most two tiles per core,
    /// at most 8 per launch.
    pub fn for_cores(cores: u32) -> SequencePolicy {
        SequencePolicy {
            enabled: true,
            max_stage_tiles: 2 * cores.max(1) as u64,
            max_stages: 8,
        }
    }

    /// No sequence launches.
    pub fn off() -> SequencePolicy {
        SequencePolicy {
            enabled: false,
            max_stage_tiles: 0,
            max_stages: 0,
        }
    }
}

/// Packs runs of consecutive single-kernel launches whose kernels are small
/// (`tiles[step]` tiles in `bodies[step]` bodies) into sequence launches,
/// within the executor's body limit and the parameter limit.
pub fn pack_sequences(plan: &mut Plan, tiles: &[u64], bodies: &[usize], policy: &SequencePolicy) {
    if !policy.enabled || policy.max_stages < 2 {
        return;
    }
    let max_bodies = dvm_device::predecode::DEFAULT_BODIES;
    let old = std::mem::take(&mut plan.launches);
    let mut out: Vec<Launch> = Vec::with_capacity(old.len());
    let mut run: Vec<usize> = Vec::new();
    let mut run_bodies = 0usize;
    let flush = |run: &mut Vec<usize>, out: &mut Vec<Launch>| {
        match run.len() {
            0 => {}
            1 => out.push(Launch {
                kind: LaunchKind::Single,
                steps: vec![run[0]],
            }),
            _ => out.push(Launch {
                kind: LaunchKind::Sequence,
                steps: run.clone(),
            }),
        }
        run.clear();
    };
    for l in old {
        let small = l.kind == LaunchKind::Single
            && l.steps.len() == 1
            && tiles
                .get(l.steps[0])
                .is_some_and(|&t| t <= policy.max_stage_tiles);
        if !small {
            flush(&mut run, &mut out);
            run_bodies = 0;
            out.push(l);
            continue;
        }
        let s = l.steps[0];
        let b = bodies.get(s).copied().unwrap_or(1);
        let mut trial = run.clone();
        trial.push(s);
        let (args, _) = plan.launch_args(&Launch {
            kind: LaunchKind::Sequence,
            steps: trial,
        });
        let fits = run.len() < policy.max_stages
            && run_bodies + b <= max_bodies
            && args.len() <= dvm_isa::verify::MAX_PARAMS;
        if !fits {
            flush(&mut run, &mut out);
            run_bodies = 0;
        }
        run.push(s);
        run_bodies += b;
    }
    flush(&mut run, &mut out);
    plan.launches = out;
}

#[cfg(test)]
mod tests {
    use dvm_isa::{DType, KernelKind, Opcode, ParamAccess};

    use super::*;
    use crate::codegen::{compile, Group, GroupKind, Target, TileOp, View};
    use crate::lower::{Buf, BufKind, Launch, LaunchKind, Plan, Step};

    fn ew_group(n: u64, op: Opcode) -> Group {
        let v = View::contiguous(DType::F32, &[n]);
        Group {
            kind: GroupKind::Elementwise { shape: vec![n] },
            inputs: vec![v.clone()],
            nodes: vec![
                (TileOp::Input(0), DType::F32),
                (TileOp::Unary(op, 0), DType::F32),
            ],
            outputs: vec![(1, v)],
        }
    }

    #[test]
    fn stacking_relinks_parameters_and_merges_access() {
        let t = Target::default();
        let a = compile(&ew_group(100, Opcode::Exp), "a", &t).unwrap();
        let b = compile(&ew_group(100, Opcode::Neg), "b", &t).unwrap();
        // Sequence: a reads buffer 0 and writes 1; b reads 1 and writes 2.
        let maps = vec![vec![0u8, 1], vec![1u8, 2]];
        let s = combine(KernelKind::Sequence, "ab", &[a.clone(), b.clone()], &maps).unwrap();
        assert_eq!(s.kernel.bodies.len(), 2);
        let access: Vec<ParamAccess> = s.kernel.params.iter().map(|p| p.access).collect();
        assert_eq!(
            access,
            vec![
                ParamAccess::Read,
                ParamAccess::ReadWrite,
                ParamAccess::Write
            ]
        );
        assert_eq!(s.bytes_moved, a.bytes_moved + b.bytes_moved);
        // The relinked body of b loads parameter 1 and stores parameter 2.
        let code = relink(&b.kernel.bodies[0].code, &[1, 2]).unwrap();
        let words: Vec<zerocopy::little_endian::U64> = code
            .words()
            .iter()
            .map(|w| zerocopy::little_endian::U64::new(*w))
            .collect();
        let mut at = 0;
        let mut bufs = Vec::new();
        while at < words.len() {
            let (head, instr) = dvm_isa::Instr::decode(&words[at..]).unwrap();
            match instr {
                dvm_isa::Instr::Load { buf, .. } => bufs.push(("load", buf)),
                dvm_isa::Instr::Store { buf, .. } => bufs.push(("store", buf)),
                _ => {}
            }
            at += head.len as usize;
        }
        assert_eq!(bufs, vec![("load", 1), ("store", 2)]);
        // A stacked kernel verifies and predecodes.
        crate::kernel::ready(s, &t).unwrap();
        // A map naming a parameter twice with different dtypes is refused.
        let mut c8 = ew_group(100, Opcode::Neg);
        c8.inputs[0].dtype = DType::I32;
        c8.nodes[0].1 = DType::I32;
        c8.outputs[0].1.dtype = DType::I32;
        c8.nodes[1].1 = DType::I32;
        let c8 = compile(&c8, "c", &t).unwrap();
        assert!(combine(
            KernelKind::Parallel,
            "x",
            &[a, c8],
            &[vec![0, 1], vec![0, 2]]
        )
        .is_err());
    }

    #[test]
    fn small_consecutive_kernels_pack_into_sequences() {
        let mut p = Plan::default();
        for _ in 0..6 {
            p.buffers.push(Buf {
                kind: BufKind::Temp,
                bytes: 400,
            });
        }
        for s in 0..5 {
            p.steps.push(Step {
                name: format!("s{s}"),
                group: ew_group(100, Opcode::Exp),
                args: vec![s, s + 1],
                nodes: Vec::new(),
            });
            p.launches.push(Launch {
                kind: LaunchKind::Single,
                steps: vec![s],
            });
        }
        let policy = SequencePolicy {
            enabled: true,
            max_stage_tiles: 4,
            max_stages: 8,
        };
        pack_sequences(&mut p, &[1, 1, 100, 1, 1], &[1; 5], &policy);
        let got: Vec<(LaunchKind, Vec<usize>)> = p
            .launches
            .iter()
            .map(|l| (l.kind, l.steps.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (LaunchKind::Sequence, vec![0, 1]),
                (LaunchKind::Single, vec![2]),
                (LaunchKind::Sequence, vec![3, 4]),
            ]
        );
        // At most `max_stages` per launch.
        let mut q = p.clone();
        q.launches = (0..5)
            .map(|s| Launch {
                kind: LaunchKind::Single,
                steps: vec![s],
            })
            .collect();
        let two = SequencePolicy {
            max_stages: 2,
            ..policy
        };
        pack_sequences(&mut q, &[1; 5], &[1; 5], &two);
        let sizes: Vec<usize> = q.launches.iter().map(|l| l.steps.len()).collect();
        assert_eq!(sizes, vec![2, 2, 1]);
        // Off: unchanged.
        let mut r = q.clone();
        pack_sequences(&mut r, &[1; 5], &[1; 5], &SequencePolicy::off());
        assert_eq!(r.launches, q.launches);
    }
}

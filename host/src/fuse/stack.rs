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

use crate::compile::{compile, CompileError, Compiled, Group, Target};
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
            Instr::Load { buf, .. } | Instr::Store { buf, .. } | Instr::StoreAdd { buf, .. } => {
                remap(buf)?
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

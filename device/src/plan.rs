//! The per-body plan: which fused forms a body's full tiles run in,
//! decided once at predecode from its virtual instructions, and what the
//! executor (`crate::exec`) matches on.
//!
//! Two kinds of fusion meet here. The superinstructions of
//! [`crate::peephole`] replace instructions in the body's code (a fused
//! [`UbOp`] with its own [`Peep`], a store with a [`StoreMap`]); the forms
//! of this module keep the code as it is and say how full tiles may run
//! past it: straight over global memory ([`Forward`]), or with a load
//! fused into what follows it ([`FusedLoad`], [`LoadPair`]). Each form
//! carries the handlers and operands it runs with, so the executor only
//! checks the launch's buffers against it ([`BodyPlan::launched`]) and
//! falls back to running the instructions one by one on tiles the form
//! does not take (tails, padding).
//!
//! [`BodyPlan::forms`] lists both kinds by name ([`FusedForm`]), for
//! tests that assert a kernel fused as intended.

use core::fmt;

use dvm_isa::GmPattern;

use crate::forward::{self, Forward};
use crate::gm::{GmBuf, StoreMap};
use crate::loadfold;
use crate::ops::{GmHandler, Handler, Peep, RowHandler, UbArgs, UbOp};
use crate::vinstr::VInstr;

/// The fold along columns of a fused `load x; fold x` pair
/// ([`loadfold::plan`]).
#[derive(Clone, Copy, Debug)]
pub struct LoadFold {
    /// Index of the load in the body (the fold is the next instruction).
    pub at: u8,
    /// The fold fused with the load: `load(ub, box, _, args)` folds the
    /// tile in global memory as it copies it into UB.
    pub load: GmHandler,
    /// The fold alone over the tile in global memory (when the tile is not
    /// copied into UB: [`FusedLoad::SoftmaxGm`]).
    pub fold: GmHandler,
    /// The fold's operands.
    pub args: UbArgs,
}

/// The instruction after a fused pair, reading the loaded tile in global
/// memory ([`loadfold::plan_map`]; the softmax superinstruction).
#[derive(Clone, Copy, Debug)]
pub struct GmMap {
    /// `handler(ub, box, _, args)`.
    pub handler: GmHandler,
    /// Its operands.
    pub args: UbArgs,
}

/// A softmax's tail run with its middle a row at a time
/// ([`loadfold::plan_rows`]): the element-wise op on the row sums and the
/// scaled store of the tile.
#[derive(Clone, Copy, Debug)]
pub struct SoftmaxTail {
    /// The middle one row at a time, storing a scaled row on the way.
    pub row: RowHandler,
    /// The element-wise op on the sums (`1/sum`).
    pub unary: Handler,
    /// Its operands.
    pub unary_args: UbArgs,
    /// The scaled store's box.
    pub store: GmPattern,
    /// Index of the store in the body.
    pub store_at: u8,
    /// Whether the store streams (non-temporal stores).
    pub stream: bool,
}

/// A load fused with the fold along columns after it, and how much of
/// what follows runs with it. Each variant includes the ones before it:
/// a tile the larger form does not take runs in the smaller one.
#[derive(Clone, Copy, Debug)]
pub enum FusedLoad {
    /// `load x; fold x` in one pass ([`FusedForm::LoadFoldCols`]).
    FoldCols(LoadFold),
    /// Then the softmax superinstruction reading `x` in global memory, the
    /// tile never copied into UB ([`FusedForm::SoftmaxGm`]).
    SoftmaxGm(LoadFold, GmMap),
    /// Then the softmax's tail, the three a row at a time
    /// ([`FusedForm::SoftmaxRows`]).
    SoftmaxRows(LoadFold, GmMap, SoftmaxTail),
}

impl FusedLoad {
    /// The fused pair.
    pub fn fold(&self) -> &LoadFold {
        match self {
            FusedLoad::FoldCols(f) | FusedLoad::SoftmaxGm(f, _) | FusedLoad::SoftmaxRows(f, ..) => {
                f
            }
        }
    }
}

/// Two loads fused with the binary op and row sums after them, the op
/// reading both tiles in global memory ([`loadfold::plan_pair`];
/// [`FusedForm::LoadPair`]).
#[derive(Clone, Copy, Debug)]
pub struct LoadPair {
    /// Index of the first load (the second is next, then the op).
    pub at: u8,
    /// The second load's box.
    pub second: GmPattern,
    /// The op (its operands, and its rows: [`UbOp::row`]).
    pub op: UbOp,
    /// `handler(ub, x, y, args)` over both tiles in global memory.
    pub handler: GmHandler,
}

/// One body's plan, decided once at predecode ([`BodyPlan::decide`]).
///
/// A forwarded body runs its full tiles straight over global memory and
/// its other tiles through UB, where the fused loads apply; the two kinds
/// of form therefore coexist in one plan.
#[derive(Clone, Copy, Debug, Default)]
pub struct BodyPlan {
    /// Full tiles straight over global memory ([`crate::forward`]).
    pub forward: Option<Forward>,
    /// A load fused with the fold after it ([`crate::loadfold`]).
    pub load: Option<FusedLoad>,
    /// Two loads fused with the op after them ([`crate::loadfold`]).
    pub pair: Option<LoadPair>,
    /// Index of the streaming store that prefetches the next tile's loads
    /// (the body's last streaming store), if the body loads anything.
    pub prefetch_at: Option<u32>,
    /// Ops that run a row at a time ([`UbOp::by_rows`]), each issuing a
    /// share of the next tile's prefetches when `prefetch_at` is set.
    pub row_ops: u32,
}

/// The forms of a [`BodyPlan`] a launch's buffers allow
/// ([`BodyPlan::launched`]).
#[derive(Clone, Copy, Debug)]
pub struct Launched<'p> {
    /// As [`BodyPlan::forward`], when the stored buffer overlaps no
    /// loaded one.
    pub forward: Option<&'p Forward>,
    /// As [`BodyPlan::load`], when the loaded buffer overlaps no writable
    /// one.
    pub load: Option<&'p FusedLoad>,
    /// As [`BodyPlan::pair`], when neither loaded buffer overlaps a
    /// writable one.
    pub pair: Option<&'p LoadPair>,
}

impl BodyPlan {
    /// The plan of body `code`, whose kernel's other bodies (sharing its
    /// UB) are `others`.
    pub fn decide<'a>(code: &[VInstr], others: impl Iterator<Item = &'a [VInstr]> + Clone) -> Self {
        let forward = forward::plan(code).filter(|f| f.independent(code, others.clone()));
        let pair = loadfold::plan_pair(code, others).and_then(|at| load_pair(code, at));
        let load = loadfold::plan(code).and_then(|at| fused_load(code, at));
        let has_load = code.iter().any(|v| matches!(v, VInstr::Load { .. }));
        let prefetch_at = code
            .iter()
            .rposition(|v| matches!(v, VInstr::Store { stream: true, .. }))
            .filter(|_| has_load)
            .map(|i| i as u32);
        let row_ops = code
            .iter()
            .filter(|v| matches!(v, VInstr::Ub(op) if op.by_rows()))
            .count() as u32;
        BodyPlan {
            forward,
            load,
            pair,
            prefetch_at,
            row_ops,
        }
    }

    /// The forms `bufs` allow: forwarding when the stored buffer overlaps
    /// no loaded one ([`Forward::fits`]), a fused load when its buffer
    /// overlaps no writable one ([`loadfold::fits`]; the fused pass reads
    /// the tile as a slice).
    pub fn launched<'p>(&'p self, code: &[VInstr], bufs: &[GmBuf<'_>]) -> Launched<'p> {
        let fits = |at: u8| loadfold::fits(code, at, bufs);
        Launched {
            forward: self.forward.as_ref().filter(|f| f.fits(code, bufs)),
            load: self.load.as_ref().filter(|l| fits(l.fold().at)),
            pair: self.pair.as_ref().filter(|p| {
                fits(p.at) && fits(p.at + 1) && bufs.get(p.second.buf as usize).is_some()
            }),
        }
    }

    /// The fused forms of body `code` under this plan: the plan's own and
    /// the superinstructions in the code.
    pub fn forms(&self, code: &[VInstr]) -> FusedForms {
        let mut f = FusedForms::EMPTY;
        if self.forward.is_some() {
            f.insert(FusedForm::Forward);
        }
        match self.load {
            None => {}
            Some(FusedLoad::FoldCols(_)) => f.insert(FusedForm::LoadFoldCols),
            Some(FusedLoad::SoftmaxGm(..)) => {
                f.insert(FusedForm::LoadFoldCols);
                f.insert(FusedForm::SoftmaxGm);
            }
            Some(FusedLoad::SoftmaxRows(..)) => {
                f.insert(FusedForm::LoadFoldCols);
                f.insert(FusedForm::SoftmaxGm);
                f.insert(FusedForm::SoftmaxRows);
            }
        }
        if self.pair.is_some() {
            f.insert(FusedForm::LoadPair);
        }
        for v in code {
            let form = match v {
                VInstr::Ub(op) => match op.peep {
                    Peep::BinaryCol(..) => Some(FusedForm::BinaryCol),
                    Peep::BinaryRow(..) => Some(FusedForm::BinaryRow),
                    Peep::BinarySumCols(..) => Some(FusedForm::BinaryFoldCols),
                    Peep::SoftmaxMiddle => Some(FusedForm::SoftmaxMiddle),
                    Peep::Center => Some(FusedForm::NormMiddle),
                    Peep::Affine => Some(FusedForm::NormTail),
                    Peep::None
                    | Peep::BroadcastCol(_)
                    | Peep::BroadcastRow(_)
                    | Peep::Binary(..)
                    | Peep::Exp(_)
                    | Peep::SumCols(_)
                    | Peep::Unary(_) => None,
                },
                VInstr::Store { map, .. } => match map {
                    StoreMap::Copy => None,
                    StoreMap::Scale(_) => Some(FusedForm::ScaleStore),
                    StoreMap::Affine(_) => Some(FusedForm::NormTailStore),
                },
                VInstr::Load { .. }
                | VInstr::Gather { .. }
                | VInstr::StoreAdd(_)
                | VInstr::Barrier => None,
            };
            if let Some(form) = form {
                f.insert(form);
            }
        }
        f
    }
}

/// The fused load starting at `at` ([`loadfold::plan`] chose it), with as
/// much of what follows as [`loadfold::plan_map`] and
/// [`loadfold::plan_rows`] allow.
fn fused_load(code: &[VInstr], at: u8) -> Option<FusedLoad> {
    let i = at as usize;
    let Some(VInstr::Ub(fold)) = code.get(i + 1) else {
        return None;
    };
    let gm = fold.gm?;
    let pair = LoadFold {
        at,
        load: gm.load?,
        fold: gm.handler,
        args: fold.args,
    };
    if !loadfold::plan_map(code, at) {
        return Some(FusedLoad::FoldCols(pair));
    }
    let Some(VInstr::Ub(map_op)) = code.get(i + 2) else {
        return Some(FusedLoad::FoldCols(pair));
    };
    let Some(handler) = map_op.from_gm else {
        return Some(FusedLoad::FoldCols(pair));
    };
    let map = GmMap {
        handler,
        args: map_op.args,
    };
    let tail = match (
        loadfold::plan_rows(code, at),
        map_op.from_gm_row,
        code.get(i + 3),
        code.get(i + 4),
    ) {
        (
            true,
            Some(row),
            Some(VInstr::Ub(un)),
            Some(VInstr::Store {
                pattern, stream, ..
            }),
        ) => Some(SoftmaxTail {
            row,
            unary: un.handler,
            unary_args: un.args,
            store: *pattern,
            store_at: (i + 4) as u8,
            stream: *stream,
        }),
        _ => None,
    };
    Some(match tail {
        Some(tail) => FusedLoad::SoftmaxRows(pair, map, tail),
        None => FusedLoad::SoftmaxGm(pair, map),
    })
}

/// The fused pair of loads starting at `at` ([`loadfold::plan_pair`]
/// chose it).
fn load_pair(code: &[VInstr], at: u8) -> Option<LoadPair> {
    let i = at as usize;
    match (code.get(i + 1), code.get(i + 2)) {
        (Some(VInstr::Load { pattern, .. }), Some(VInstr::Ub(op))) => Some(LoadPair {
            at,
            second: *pattern,
            op: *op,
            handler: op.from_gm_pair?,
        }),
        _ => None,
    }
}

/// A fused form a body runs in: a superinstruction of
/// [`crate::peephole`] or a form of a [`BodyPlan`].
///
/// [`FusedForm::name`] is stable: tests on the host assert with it which
/// forms a compiled kernel's bodies use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FusedForm {
    /// `"forward"`: a lone element-wise op or fold along columns run
    /// straight over global memory on full tiles ([`crate::forward`]).
    Forward,
    /// `"load_fold_cols"`: a load and the fold along columns after it in
    /// one pass ([`FusedLoad::FoldCols`]).
    LoadFoldCols,
    /// `"softmax_gm"`: after that pair, the softmax superinstruction reads
    /// the tile in global memory, never copied into UB
    /// ([`FusedLoad::SoftmaxGm`]).
    SoftmaxGm,
    /// `"softmax_rows"`: that superinstruction, the reciprocal of its sums
    /// and its scaled store a row at a time ([`FusedLoad::SoftmaxRows`]).
    SoftmaxRows,
    /// `"load_pair"`: two loads read in global memory by the binary op and
    /// row sums after them ([`LoadPair`]).
    LoadPair,
    /// `"binary_col"`: `brccol` and a binary op, a per-row value applied
    /// to each row ([`Peep::BinaryCol`]).
    BinaryCol,
    /// `"binary_row"`: `brcrow` and a binary op, a row applied to every row
    /// ([`Peep::BinaryRow`]).
    BinaryRow,
    /// `"binary_fold_cols"`: a binary op and the sums along the columns of
    /// its result ([`Peep::BinarySumCols`]).
    BinaryFoldCols,
    /// `"softmax_middle"`: `x − v[r]`, `exp` and the row sums in one pass
    /// ([`Peep::SoftmaxMiddle`]).
    SoftmaxMiddle,
    /// `"norm_middle"`: a norm's `x − m[r]`, squares and their row sums
    /// ([`Peep::Center`]).
    NormMiddle,
    /// `"norm_tail"`: a norm's row scale, weight and bias in place
    /// ([`Peep::Affine`]).
    NormTail,
    /// `"scale_store"`: an `f32` row scale fused into the store after it
    /// ([`StoreMap::Scale`]).
    ScaleStore,
    /// `"norm_tail_store"`: a norm's tail fused into the store after it
    /// ([`StoreMap::Affine`]).
    NormTailStore,
}

impl FusedForm {
    /// Every form, in declaration order.
    pub const ALL: [FusedForm; 13] = [
        FusedForm::Forward,
        FusedForm::LoadFoldCols,
        FusedForm::SoftmaxGm,
        FusedForm::SoftmaxRows,
        FusedForm::LoadPair,
        FusedForm::BinaryCol,
        FusedForm::BinaryRow,
        FusedForm::BinaryFoldCols,
        FusedForm::SoftmaxMiddle,
        FusedForm::NormMiddle,
        FusedForm::NormTail,
        FusedForm::ScaleStore,
        FusedForm::NormTailStore,
    ];

    /// The form's stable name (`"forward"`, `"load_fold_cols"`, …).
    pub const fn name(self) -> &'static str {
        match self {
            FusedForm::Forward => "forward",
            FusedForm::LoadFoldCols => "load_fold_cols",
            FusedForm::SoftmaxGm => "softmax_gm",
            FusedForm::SoftmaxRows => "softmax_rows",
            FusedForm::LoadPair => "load_pair",
            FusedForm::BinaryCol => "binary_col",
            FusedForm::BinaryRow => "binary_row",
            FusedForm::BinaryFoldCols => "binary_fold_cols",
            FusedForm::SoftmaxMiddle => "softmax_middle",
            FusedForm::NormMiddle => "norm_middle",
            FusedForm::NormTail => "norm_tail",
            FusedForm::ScaleStore => "scale_store",
            FusedForm::NormTailStore => "norm_tail_store",
        }
    }

    /// The form named `name` ([`FusedForm::name`]).
    pub fn from_name(name: &str) -> Option<FusedForm> {
        FusedForm::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl fmt::Display for FusedForm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of [`FusedForm`]s: the forms one body uses
/// ([`crate::Program::fused_forms`]). Iterates in [`FusedForm::ALL`]
/// order; `Debug` lists the names.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FusedForms(u32);

impl FusedForms {
    /// No form.
    pub const EMPTY: FusedForms = FusedForms(0);

    /// Adds `form`.
    pub fn insert(&mut self, form: FusedForm) {
        self.0 |= 1 << form as u32;
    }

    /// Whether the set holds `form`.
    pub fn contains(self, form: FusedForm) -> bool {
        self.0 & (1 << form as u32) != 0
    }

    /// Whether the set holds no form.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many forms the set holds.
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The forms, in [`FusedForm::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = FusedForm> {
        FusedForm::ALL
            .into_iter()
            .filter(move |f| self.contains(*f))
    }

    /// The forms' names, in [`FusedForm::ALL`] order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        self.iter().map(FusedForm::name)
    }
}

impl FromIterator<FusedForm> for FusedForms {
    fn from_iter<I: IntoIterator<Item = FusedForm>>(iter: I) -> Self {
        let mut s = FusedForms::EMPTY;
        for f in iter {
            s.insert(f);
        }
        s
    }
}

impl fmt::Debug for FusedForms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.names()).finish()
    }
}

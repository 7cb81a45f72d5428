//! The fusion rules, each defined once: its name, which groups it joins,
//! and the legality check of a join. Two drivers apply them and keep only
//! their traversal and bookkeeping: [`super::pattern`] runs them to a fixed
//! point over a static graph (one incremental [`super::Rule`] object per
//! entry of [`RULES`]), [`super::sweep`] in one pass over an eager window
//! (a phase per kind of join, merges named by the entry they apply).
//!
//! | rule | merges or stacks |
//! |---|---|
//! | `elementwise-chain` | an element-wise group into its element-wise consumer (same space, or a broadcast producer that is not stored) |
//! | `reduce-prologue` | an element-wise group into the reduction that consumes it |
//! | `reduce-epilogue` | a reduction into the element-wise group that consumes its result (values broadcast back along the axis) |
//! | `reduce-chain` | two reductions of the same axis and space (layernorm's mean and variance) |
//! | `matmul-epilogue` | an element-wise consumer into the matmul (bias, activation, residual, scaling): the mix kernel |
//! | `siblings` | element-wise or reduce groups that read a common input over the same space (several outputs, the input loaded once) |
//! | `parallel-stack` | independent groups that read a common input (e.g. the q, k, v projections): one parallel launch |
//!
//! The table is in priority order: an earlier rule wins a contested
//! operator. Reductions take their neighbours before matmuls do: a
//! reduction is memory-bound and gains the most from keeping its prologue
//! and epilogue in UB, while an element-wise tail costs a matmul kernel
//! the same either way.
//!
//! A merge ([`Joins::Edge`], [`Joins::Siblings`]) is legal when
//! `check_merge` accepts the union, each driver answering its questions
//! from its own bookkeeping (the `Union` trait). A stack ([`Joins::Stack`]) is
//! legal for groups that depend on each other by no path, at most
//! [`FuseOptions::max_stack`] of them.

use super::{FuseOptions, FusionKind};

/// A set of group kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kinds(u8);

impl Kinds {
    /// Element-wise groups.
    pub const ELEMENTWISE: Kinds = Kinds(1);
    /// Reduce groups.
    pub const REDUCE: Kinds = Kinds(2);
    /// Matmul groups.
    pub const MATMUL: Kinds = Kinds(4);
    /// Every kind.
    pub const ALL: Kinds = Kinds(7);
    /// Element-wise and reduce groups: those that fold no matmul.
    pub const NOT_MATMUL: Kinds = Kinds(3);

    const fn bit(k: &FusionKind) -> u8 {
        match k {
            FusionKind::Elementwise => 1,
            FusionKind::Reduce { .. } => 2,
            FusionKind::Matmul => 4,
        }
    }

    /// Whether a group of kind `k` is in the set.
    #[inline]
    pub const fn has(self, k: &FusionKind) -> bool {
        self.0 & Self::bit(k) != 0
    }

    const fn union(self, other: Kinds) -> Kinds {
        Kinds(self.0 | other.0)
    }

    const fn meets(self, other: Kinds) -> bool {
        self.0 & other.0 != 0
    }
}

/// Which groups a rule joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Joins {
    /// A producer group into a consumer group that reads one of its
    /// values.
    Edge {
        /// Kinds of the producer.
        producer: Kinds,
        /// Kinds of the consumer.
        consumer: Kinds,
    },
    /// Groups that read a common value neither of them holds.
    Siblings {
        /// Kinds of both.
        of: Kinds,
    },
    /// Independent groups that read a common value none of them holds,
    /// into one parallel launch (each keeps its own body and iteration
    /// space, so no shape needs to agree).
    Stack {
        /// Kinds of every member.
        of: Kinds,
    },
}

/// One fusion rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleDef {
    /// Name, in the plan's applied rewrites, rejections and `dvm explain`.
    pub name: &'static str,
    /// The groups it joins.
    pub joins: Joins,
}

impl RuleDef {
    /// Whether the rule may join a group of kind `a` (the producer of an
    /// edge) with one of kind `b` (the consumer). Stacks take their
    /// members one at a time: both are members.
    #[inline]
    pub const fn joins_kinds(&self, a: &FusionKind, b: &FusionKind) -> bool {
        match self.joins {
            Joins::Edge { producer, consumer } => producer.has(a) && consumer.has(b),
            Joins::Siblings { of } | Joins::Stack { of } => of.has(a) && of.has(b),
        }
    }

    /// Whether it is an edge rule out of a matmul group: applied after the
    /// edge rules between element-wise and reduce groups, which come first
    /// in [`RULES`].
    pub const fn from_matmul(&self) -> bool {
        matches!(self.joins, Joins::Edge { producer, .. } if producer.meets(Kinds::MATMUL))
    }
}

const fn edge(name: &'static str, producer: Kinds, consumer: Kinds) -> RuleDef {
    RuleDef {
        name,
        joins: Joins::Edge { producer, consumer },
    }
}

/// The rules, in priority order.
pub const RULES: [RuleDef; 7] = [
    edge("elementwise-chain", Kinds::ELEMENTWISE, Kinds::ELEMENTWISE),
    edge("reduce-prologue", Kinds::ELEMENTWISE, Kinds::REDUCE),
    edge("reduce-epilogue", Kinds::REDUCE, Kinds::ELEMENTWISE),
    edge("reduce-chain", Kinds::REDUCE, Kinds::REDUCE),
    MATMUL_EPILOGUE,
    SIBLINGS,
    PARALLEL_STACK,
];

/// The edge rule out of a matmul group.
pub const MATMUL_EPILOGUE: RuleDef = edge("matmul-epilogue", Kinds::MATMUL, Kinds::ELEMENTWISE);

/// The merge of groups reading a common value.
pub const SIBLINGS: RuleDef = RuleDef {
    name: "siblings",
    joins: Joins::Siblings {
        of: Kinds::NOT_MATMUL,
    },
};

/// The stack of independent groups reading a common value.
pub const PARALLEL_STACK: RuleDef = RuleDef {
    name: "parallel-stack",
    joins: Joins::Stack { of: Kinds::ALL },
};

/// The kinds of `FusionKind`, one of each (for the tables below).
const EACH_KIND: [FusionKind; 3] = [
    FusionKind::Elementwise,
    FusionKind::Reduce { axis: 0 },
    FusionKind::Matmul,
];

/// Per producer kind and consumer kind (by [`index`]): the index in
/// [`RULES`] of the first edge rule joining them, or `u8::MAX`; with
/// `FORWARD`, only of the rules not [`RuleDef::from_matmul`].
const fn edge_rules<const FORWARD: bool>() -> [[u8; 3]; 3] {
    let mut t = [[u8::MAX; 3]; 3];
    let mut p = 0;
    while p < 3 {
        let mut c = 0;
        while c < 3 {
            let mut r = RULES.len();
            while r > 0 {
                r -= 1;
                if matches!(RULES[r].joins, Joins::Edge { .. })
                    && !(FORWARD && RULES[r].from_matmul())
                    && RULES[r].joins_kinds(&EACH_KIND[p], &EACH_KIND[c])
                {
                    t[p][c] = r as u8;
                }
            }
            c += 1;
        }
        p += 1;
    }
    t
}

/// [`edge_rules`] of every edge rule.
const EDGE_RULE: [[u8; 3]; 3] = edge_rules::<false>();

/// [`edge_rules`] of the edge rules not out of a matmul.
const FORWARD_RULE: [[u8; 3]; 3] = edge_rules::<true>();

/// The position of `k` in [`EACH_KIND`].
#[inline]
const fn index(k: &FusionKind) -> usize {
    match k {
        FusionKind::Elementwise => 0,
        FusionKind::Reduce { .. } => 1,
        FusionKind::Matmul => 2,
    }
}

/// The first edge rule, in priority order, that merges a producer group of
/// kind `producer` into a consumer group of kind `consumer`, with its
/// index in [`RULES`] (its priority: lower first).
#[inline]
pub fn edge_rule(
    producer: &FusionKind,
    consumer: &FusionKind,
) -> Option<(usize, &'static RuleDef)> {
    let r = EDGE_RULE[index(producer)][index(consumer)];
    (r != u8::MAX).then(|| (r as usize, &RULES[r as usize]))
}

/// [`edge_rule`] among the edge rules not [`RuleDef::from_matmul`]: the
/// sweep's forward phase.
#[inline]
pub fn forward_rule(
    producer: &FusionKind,
    consumer: &FusionKind,
) -> Option<(usize, &'static RuleDef)> {
    let r = FORWARD_RULE[index(producer)][index(consumer)];
    (r != u8::MAX).then(|| (r as usize, &RULES[r as usize]))
}

/// The kinds of the producers and of the consumers of the edge rules
/// between element-wise and reduce groups (those not [`RuleDef::from_matmul`]).
const fn between_ewise_and_reduce() -> (Kinds, Kinds) {
    let (mut producers, mut consumers) = (Kinds(0), Kinds(0));
    let mut r = 0;
    while r < RULES.len() {
        if let Joins::Edge { producer, consumer } = RULES[r].joins {
            if !RULES[r].from_matmul() {
                producers = producers.union(producer);
                consumers = consumers.union(consumer);
            }
        }
        r += 1;
    }
    (producers, consumers)
}

/// The kinds of the producers of the edge rules not out of a matmul.
pub const FORWARD_PRODUCERS: Kinds = between_ewise_and_reduce().0;

/// The kinds of the consumers of the edge rules not out of a matmul.
pub const FORWARD_CONSUMERS: Kinds = between_ewise_and_reduce().1;

/// Why [`check_merge`] refused a union.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// More nodes than [`FuseOptions::max_nodes`] (their count).
    TooManyNodes(usize),
    /// A unit outside the union depends on it and it on that unit.
    Cycle,
    /// Not one group for every binding ([`super::legality::validate`]
    /// says why).
    Invalid,
    /// More buffer parameters than [`FuseOptions::max_params`] (their
    /// count).
    TooManyParams(usize),
}

/// A candidate union of groups, as a driver holds it: the questions of
/// [`check_merge`], each answered from the driver's own bookkeeping.
pub(super) trait Union {
    /// Nodes in the union (of the graph's decomposition).
    fn size(&self) -> usize;
    /// Whether a unit outside the union depends on it and it on that
    /// unit: merged, it would close a cycle between kernels.
    fn closes_cycle(&mut self) -> bool;
    /// Whether the union forms one group for every binding: its kind and
    /// space (a shape id), as [`super::legality::validate_union`] finds.
    fn validate(&mut self) -> Option<(FusionKind, u32)>;
    /// An upper bound of the union's buffer parameters
    /// ([`super::count_params`]): at most its parts' together.
    fn param_bound(&self) -> usize;
    /// A tighter bound than the last (`step` counts them from 1), the last
    /// one exact; `None` past the exact count.
    fn tighter_params(&mut self, step: usize) -> Option<usize>;
}

/// The legality check of every merge: the union `u` is within the node
/// limit, closes no cycle between kernels, forms one group for every
/// binding and is within the parameter limit (a bound tightened only when
/// over it), asked in that order. Its kind, space and parameter bound.
///
/// # Errors
/// The first check it fails.
#[inline]
pub(super) fn check_merge<U: Union>(
    u: &mut U,
    opts: &FuseOptions,
) -> Result<(FusionKind, u32, usize), Refusal> {
    let n = u.size();
    if n > opts.max_nodes {
        return Err(Refusal::TooManyNodes(n));
    }
    if u.closes_cycle() {
        return Err(Refusal::Cycle);
    }
    let (kind, space) = u.validate().ok_or(Refusal::Invalid)?;
    let mut bound = u.param_bound();
    let mut step = 0;
    while bound > opts.max_params {
        step += 1;
        bound = u
            .tighter_params(step)
            .ok_or(Refusal::TooManyParams(bound))?;
    }
    Ok((kind, space, bound))
}

//! Property tests: canonicalisation preserves values, text round-trips, the
//! parser never panics, and proofs are sound.

use proptest::prelude::*;

use super::*;

const NAMES: [&str; 3] = ["S", "T", "U"];

/// A reference expression, evaluated directly.
#[derive(Clone, Debug)]
enum Expr {
    Val(i64),
    Sym(usize),
    Add(Box<Expr>, Box<Expr>),
    Sub(Box<Expr>, Box<Expr>),
    Mul(Box<Expr>, Box<Expr>),
    Neg(Box<Expr>),
    Div(Box<Expr>, i64),
    Rem(Box<Expr>, i64),
    Min(Box<Expr>, Box<Expr>),
    Max(Box<Expr>, Box<Expr>),
}

fn expr() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![
        (-4i64..=12).prop_map(Expr::Val),
        (0..NAMES.len()).prop_map(Expr::Sym)
    ];
    leaf.prop_recursive(8, 128, 2, |inner| {
        let pair = || (inner.clone(), inner.clone());
        prop_oneof![
            pair().prop_map(|(a, b)| Expr::Add(Box::new(a), Box::new(b))),
            pair().prop_map(|(a, b)| Expr::Sub(Box::new(a), Box::new(b))),
            pair().prop_map(|(a, b)| Expr::Mul(Box::new(a), Box::new(b))),
            inner.clone().prop_map(|a| Expr::Neg(Box::new(a))),
            (inner.clone(), 1i64..=9).prop_map(|(a, k)| Expr::Div(Box::new(a), k)),
            (inner.clone(), 1i64..=9).prop_map(|(a, k)| Expr::Rem(Box::new(a), k)),
            pair().prop_map(|(a, b)| Expr::Min(Box::new(a), Box::new(b))),
            pair().prop_map(|(a, b)| Expr::Max(Box::new(a), Box::new(b))),
        ]
    })
}

fn reference(e: &Expr, vals: &[i64]) -> Option<i64> {
    Some(match e {
        Expr::Val(v) => *v,
        Expr::Sym(i) => vals[*i],
        Expr::Add(a, b) => reference(a, vals)?.checked_add(reference(b, vals)?)?,
        Expr::Sub(a, b) => reference(a, vals)?.checked_sub(reference(b, vals)?)?,
        Expr::Mul(a, b) => reference(a, vals)?.checked_mul(reference(b, vals)?)?,
        Expr::Neg(a) => reference(a, vals)?.checked_neg()?,
        Expr::Div(a, k) => reference(a, vals)?.div_euclid(*k),
        Expr::Rem(a, k) => reference(a, vals)?.rem_euclid(*k),
        Expr::Min(a, b) => reference(a, vals)?.min(reference(b, vals)?),
        Expr::Max(a, b) => reference(a, vals)?.max(reference(b, vals)?),
    })
}

fn build(e: &Expr, syms: &[Symbol]) -> Dim {
    match e {
        Expr::Val(v) => Dim::val(*v),
        Expr::Sym(i) => Dim::sym(syms[*i]),
        Expr::Add(a, b) => build(a, syms) + build(b, syms),
        Expr::Sub(a, b) => build(a, syms) - build(b, syms),
        Expr::Mul(a, b) => build(a, syms) * build(b, syms),
        Expr::Neg(a) => -build(a, syms),
        Expr::Div(a, k) => build(a, syms).div(*k).unwrap(),
        Expr::Rem(a, k) => build(a, syms).rem(*k).unwrap(),
        Expr::Min(a, b) => build(a, syms).min(&build(b, syms)),
        Expr::Max(a, b) => build(a, syms).max(&build(b, syms)),
    }
}

fn symbols(scope: &mut SymbolScope) -> Vec<Symbol> {
    NAMES.iter().map(|n| scope.symbol(n).unwrap()).collect()
}

fn bindings(syms: &[Symbol], vals: &[i64]) -> Bindings {
    syms.iter().copied().zip(vals.iter().copied()).collect()
}

/// `Dim` evaluation agrees with the reference whenever neither overflows (an
/// expanded polynomial may overflow where the factored original does not).
fn agrees(d: &Dim, e: &Expr, syms: &[Symbol], vals: &[i64]) -> Result<(), TestCaseError> {
    match (d.eval(&bindings(syms, vals)), reference(e, vals)) {
        (Ok(got), Some(want)) => prop_assert_eq!(got, want, "{} at {:?}", d, vals),
        (Err(SymError::Overflow { .. }), _) | (_, None) => {}
        (Err(err), Some(_)) => prop_assert!(false, "{} at {:?}: {}", d, vals, err),
    }
    Ok(())
}

/// Scope facts for S, T, U: (lo, width, multiple) each.
fn facts() -> impl Strategy<Value = Vec<(i64, i64, i64)>> {
    proptest::collection::vec(
        (
            -6i64..=20,
            0i64..=40,
            prop_oneof![Just(1i64), Just(2), Just(4), Just(8)],
        ),
        3,
    )
}

fn scope_with(facts: &[(i64, i64, i64)]) -> Option<(SymbolScope, Vec<Symbol>)> {
    let mut scope = SymbolScope::new();
    let syms = symbols(&mut scope);
    for (s, &(lo, width, m)) in syms.iter().zip(facts) {
        scope.declare_range(*s, lo, lo + width).ok()?;
        scope.declare_multiple_of(*s, m).ok()?;
    }
    Some((scope, syms))
}

/// A value of `sym` allowed by `scope`, picked by `pick`.
fn allowed(scope: &SymbolScope, sym: Symbol, pick: u32) -> i64 {
    let (lo, hi) = scope.range(sym);
    let m = scope.multiple_of(sym);
    lo + m * (i64::from(pick) % ((hi - lo) / m + 1))
}

proptest! {
    #[test]
    fn canonical_form_preserves_values(e in expr(), vals in proptest::collection::vec(-30i64..=60, 3)) {
        let mut scope = SymbolScope::new();
        let syms = symbols(&mut scope);
        agrees(&build(&e, &syms), &e, &syms, &vals)?;
    }

    #[test]
    fn scope_simplification_preserves_values(
        e in expr(),
        facts in facts(),
        picks in proptest::collection::vec(any::<u32>(), 3),
    ) {
        let Some((scope, syms)) = scope_with(&facts) else { return Ok(()) };
        let vals: Vec<i64> = syms.iter().zip(&picks).map(|(s, p)| allowed(&scope, *s, *p)).collect();
        let d = scope.canonical(&build(&e, &syms));
        agrees(&d, &e, &syms, &vals)?;
        prop_assert_eq!(scope.canonical(&d), d.clone(), "canonical is idempotent");
        let (lo, hi) = scope.bounds(&d);
        if let Ok(v) = d.eval(&bindings(&syms, &vals)) {
            prop_assert!(lo <= v && v <= hi, "{} = {} outside {}..={}", d, v, lo, hi);
        }
    }

    #[test]
    fn proofs_are_sound(
        a in expr(),
        b in expr(),
        facts in facts(),
        picks in proptest::collection::vec(any::<u32>(), 3),
    ) {
        let Some((scope, syms)) = scope_with(&facts) else { return Ok(()) };
        let vals: Vec<i64> = syms.iter().zip(&picks).map(|(s, p)| allowed(&scope, *s, *p)).collect();
        let (da, db) = (build(&a, &syms), build(&b, &syms));
        let (Some(va), Some(vb)) = (reference(&a, &vals), reference(&b, &vals)) else { return Ok(()) };
        if scope.prove_eq(&da, &db) { prop_assert_eq!(va, vb, "{} == {}", da, db); }
        if scope.prove_ne(&da, &db) { prop_assert_ne!(va, vb, "{} != {}", da, db); }
        if scope.prove_ge(&da, &db) { prop_assert!(va >= vb, "{} >= {}", da, db); }
        if scope.prove_le(&da, &db) { prop_assert!(va <= vb, "{} <= {}", da, db); }
        if let Ok(d) = scope.broadcast(&da, &db) {
            prop_assert!(va == vb || va == 1 || vb == 1, "broadcast {} {}", da, db);
            let want = if va == 1 { vb } else { va };
            if let Ok(vd) = d.eval(&bindings(&syms, &vals)) {
                prop_assert_eq!(vd, want, "broadcast {} {} = {}", da, db, d);
            }
        }
    }

    #[test]
    fn unification_is_sound(
        a in expr(),
        b in expr(),
        facts in facts(),
        picks in proptest::collection::vec(any::<u32>(), 3),
    ) {
        // After unify(a, b), every binding consistent with the recorded facts
        // gives a == b.
        let Some((mut scope, syms)) = scope_with(&facts) else { return Ok(()) };
        let (da, db) = (build(&a, &syms), build(&b, &syms));
        if scope.unify(&da, &db).is_err() { return Ok(()) }
        let mut binds = Bindings::new();
        for (s, p) in syms.iter().zip(&picks) {
            if scope.substitution(*s).is_none() {
                binds.set(*s, allowed(&scope, *s, *p));
            }
        }
        if scope.complete_bindings(&mut binds).is_err() { return Ok(()) }
        let vals: Vec<i64> = syms.iter().map(|s| binds.get(*s).unwrap()).collect();
        if let (Some(va), Some(vb)) = (reference(&a, &vals), reference(&b, &vals)) {
            prop_assert_eq!(va, vb, "{} == {} at {:?}", da, db, vals);
        }
    }

    #[test]
    fn display_parse_round_trips(e in expr()) {
        let mut scope = SymbolScope::new();
        let syms = symbols(&mut scope);
        let d = build(&e, &syms);
        let text = d.to_string();
        let back = Dim::parse(&text, &mut scope);
        prop_assert_eq!(back.as_ref(), Ok(&d), "{}", text);
    }

    #[test]
    fn algebraic_identities_hold_structurally(x in expr(), y in expr(), z in expr(), k in 1i64..=9) {
        let mut scope = SymbolScope::new();
        let syms = symbols(&mut scope);
        let (x, y, z) = (build(&x, &syms), build(&y, &syms), build(&z, &syms));
        prop_assert_eq!(&x + &y, &y + &x);
        prop_assert_eq!((&x + &y) + &z, &x + (&y + &z));
        prop_assert_eq!(&x * &y, &y * &x);
        prop_assert_eq!(&x - &x, Dim::ZERO);
        prop_assert_eq!(&x + &y - &y, x.clone());
        prop_assert_eq!((&x * k).div(k).unwrap(), x.clone());
        prop_assert_eq!((&x * k).rem(k).unwrap(), Dim::ZERO);
        prop_assert_eq!(x.min(&y), y.min(&x));
        prop_assert_eq!(x.max(&y).max(&z), x.max(&y.max(&z)));
        prop_assert_eq!(x.min(&x), x.clone());
        prop_assert_eq!(x.bind(&Bindings::new()), x.clone(), "construction is idempotent");
    }

    #[test]
    fn parser_never_panics(text in "\\PC{0,60}") {
        let mut scope = SymbolScope::new();
        let _ = Dim::parse(&text, &mut scope);
    }

    #[test]
    fn parser_never_panics_on_near_misses(text in "[STU0-9+*/%(), -]{0,40}|(min|max|[ST]|[0-9]{1,21}|[-+*/%(),])*") {
        let mut scope = SymbolScope::new();
        if let Ok(d) = Dim::parse(&text, &mut scope) {
            prop_assert_eq!(Dim::parse(&d.to_string(), &mut scope), Ok(d));
        }
    }
}

//! Unit tests of the symbolic-dimension algebra.

use super::*;

fn scope3() -> (SymbolScope, Dim, Dim, Dim) {
    let mut scope = SymbolScope::new();
    let s = Dim::sym(scope.symbol("S").unwrap());
    let t = Dim::sym(scope.symbol("T").unwrap());
    let u = Dim::sym(scope.symbol("U").unwrap());
    (scope, s, t, u)
}

fn p(text: &str, scope: &mut SymbolScope) -> Dim {
    Dim::parse(text, scope).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn hash(d: &Dim) -> u64 {
    use std::hash::{BuildHasher, RandomState};
    thread_local!(static STATE: RandomState = RandomState::new());
    STATE.with(|st| st.hash_one(d))
}

#[test]
fn sums_and_products_are_canonical() {
    let (mut sc, s, t, _) = scope3();
    assert_eq!(2 * &s + &s, 3 * &s);
    assert_eq!(&s - &s, Dim::ZERO);
    assert_eq!(&s * &t, &t * &s);
    assert_eq!(&s + &t + 1, 1 + (&t + &s));
    assert_eq!((&s + 1) * (&s - 1), &s * &s - 1);
    assert_eq!(hash(&(&s * 2 + &t)), hash(&(&t + &s + &s)));
    assert_eq!((&s + &t) * 2 - &t * 2, 2 * &s);
    assert_eq!(p("S*(T+1) - S", &mut sc), p("T*S", &mut sc));
    assert_eq!(
        [s.clone(), t.clone(), Dim::val(3)].iter().sum::<Dim>(),
        &s + &t + 3
    );
    assert_eq!([s.clone(), Dim::val(3)].iter().product::<Dim>(), 3 * &s);
}

#[test]
fn division_and_modulo_are_canonical() {
    let (mut sc, s, t, _) = scope3();
    assert_eq!((&s * 4).div(2).unwrap(), 2 * &s);
    assert_eq!((2 * &s + 4).div(2).unwrap(), &s + 2);
    assert_eq!(s.div(1).unwrap(), s);
    assert_eq!(s.rem(1).unwrap(), Dim::ZERO);
    assert_eq!(s.div(2).unwrap().div(3).unwrap(), s.div(6).unwrap());
    assert_eq!((3 * &s).div(2).unwrap(), &s + s.div(2).unwrap());
    assert_eq!((&s - 1).div(128).unwrap() + 1, s.div_ceil(128).unwrap());
    assert_eq!((2 * &s + 2).div(4).unwrap(), (&s + 1).div(2).unwrap());
    assert_eq!((6 * &s + 3).rem(3).unwrap(), Dim::ZERO);
    assert_eq!((5 * &s).rem(4).unwrap(), s.rem(4).unwrap());
    assert_eq!((2 * &s + 2).rem(4).unwrap(), 2 * (&s + 1).rem(2).unwrap());
    assert_eq!(s.rem(6).unwrap().rem(3).unwrap(), s.rem(3).unwrap());
    assert_eq!(s.rem(4).unwrap().rem(8).unwrap(), s.rem(4).unwrap());
    assert_eq!(s.rem(4).unwrap().div(8).unwrap(), Dim::ZERO);
    assert_eq!(Dim::val(-7).div(2).unwrap(), Dim::val(-4));
    assert_eq!(Dim::val(-7).rem(2).unwrap(), Dim::val(1));
    assert_eq!(p("(S*T*6)/3", &mut sc), 2 * &s * &t);
    assert!(s.div(0).is_err() && t.rem(-3).is_err());
}

#[test]
fn min_max_are_canonical() {
    let (_, s, t, _) = scope3();
    assert_eq!(Dim::val(3).min(&Dim::val(5)), Dim::val(3));
    assert_eq!(Dim::val(3).max(&Dim::val(5)), Dim::val(5));
    assert_eq!(s.min(&s), s);
    assert_eq!(s.min(&t), t.min(&s));
    assert_eq!(s.min(&(&s + 1)), s);
    assert_eq!(s.max(&(&s + 1)), &s + 1);
    assert_eq!(s.min(&t).min(&s), s.min(&t));
    assert_eq!(s.min(&Dim::val(4)).min(&Dim::val(2)), s.min(&Dim::val(2)));
    assert_eq!(s.rem(4).unwrap().min(&Dim::val(9)), s.rem(4).unwrap());
}

#[test]
fn display_is_readable() {
    let (mut sc, s, t, _) = scope3();
    let show = |d: Dim| d.to_string();
    assert_eq!(show(2 * &s + 1), "2*S+1");
    assert_eq!(show(s.min(&Dim::val(128))), "min(S,128)");
    assert_eq!(show(s.div(4).unwrap()), "S/4");
    assert_eq!(show((&s + 1).div(2).unwrap()), "(S+1)/2");
    assert_eq!(show(2 * s.div(4).unwrap()), "2*(S/4)");
    assert_eq!(show(&t - 2 * &s - 1), "-2*S+T-1");
    assert_eq!(show(-s.div(4).unwrap()), "-(S/4)");
    assert_eq!(show(s.rem(8).unwrap() + 1), "S%8+1");
    assert_eq!(show((2 * &s).div(3).unwrap()), "2*S/3");
    assert_eq!(show(&s * &t), "S*T");
    assert_eq!(show(Dim::val(-3)), "-3");
    assert_eq!(show(Dim::val(i64::MIN)), "(-9223372036854775807-1)");
    assert_eq!(format!("{:?}", &s + 1), "Dim(S+1)");
    for text in [
        "2*S+1",
        "min(S,128)",
        "S/4",
        "(S+1)/2",
        "max(S,T,7)",
        "S*S*T-3",
        "-(S/4)+T%3",
    ] {
        assert_eq!(show(p(text, &mut sc)), text);
    }
}

#[test]
fn parse_round_trips_and_rejects_garbage() {
    let (mut sc, s, t, _) = scope3();
    let d = (&s * 3 + &t).div(4).unwrap().max(&s.rem(6).unwrap()) - Dim::val(i64::MIN + 5) * &t;
    assert_eq!(p(&d.to_string(), &mut sc), d);
    assert_eq!(p(" min ( S , T ) * 2 ", &mut sc), 2 * s.min(&t));
    assert_eq!(p("--S", &mut sc), s);
    for bad in [
        "",
        "S+",
        "S/T",
        "S/0",
        "S%(0-2)",
        "foo(S)",
        "min()",
        "min(S,",
        "S T",
        "1 2",
        "S#",
        "é",
        "(S",
        "S)",
        "99999999999999999999",
        "min",
        "9S",
        "_",
    ] {
        let r = Dim::parse(bad, &mut sc);
        if bad == "_" {
            assert!(r.is_ok());
            continue;
        }
        assert!(
            matches!(r, Err(SymError::Parse { .. })),
            "{bad:?} gave {r:?}"
        );
    }
    let deep = format!("{}S{}", "(".repeat(100), ")".repeat(100));
    assert!(Dim::parse(&deep, &mut sc).is_err());
    assert!(Dim::parse(&"-".repeat(1000), &mut sc).is_err());
    assert!(Dim::parse(&"S+".repeat(3000), &mut sc).is_err());
    let msg = Dim::parse("S/T", &mut sc).unwrap_err().to_string();
    assert!(
        msg.contains("positive constant") && msg.contains("byte 2"),
        "{msg}"
    );
    // A failed parse adds no symbol.
    let before = sc.symbols().count();
    assert!(Dim::parse("Fresh + %", &mut sc).is_err());
    assert_eq!(sc.symbols().count(), before);
    assert!(sc.lookup("Fresh").is_none());
}

#[test]
fn big_products_stay_factored_and_overflow_is_not_folded() {
    let mut sc = SymbolScope::new();
    let sums: Vec<Dim> = (0..20).map(|i| p(&format!("A{i}+B{i}"), &mut sc)).collect();
    let prod: Dim = sums.iter().product();
    let b: Bindings = sc.symbols().map(|s| (s, 1)).collect();
    assert_eq!(prod.eval(&b).unwrap(), 1 << 20);
    assert!(prod.size() < 1000, "{}", prod.size());
    assert_eq!(p(&prod.to_string(), &mut sc).eval(&b).unwrap(), 1 << 20);
    let big = Dim::val(i64::MAX);
    let x = &big + 1;
    assert!(matches!(
        x.eval(&Bindings::new()),
        Err(SymError::Overflow { .. })
    ));
    assert_eq!(&x - 1, big);
    let s = Dim::sym(sc.symbol("S").unwrap());
    let y = &s * i64::MAX + &s * i64::MAX;
    assert_eq!(
        y.eval(&Bindings::new().with(s.as_symbol().unwrap(), 0))
            .unwrap(),
        0
    );
    assert!(y
        .eval(&Bindings::new().with(s.as_symbol().unwrap(), 1))
        .is_err());
    assert_eq!(p(&y.to_string(), &mut sc), y);
}

#[test]
fn eval_checks_everything() {
    let (_, s, t, _) = scope3();
    let (ss, ts) = (s.as_symbol().unwrap(), t.as_symbol().unwrap());
    let d = (3 * &s + &t).div(2).unwrap().min(&Dim::val(100)) + s.rem(5).unwrap();
    let b = Bindings::new().with(ss, 7).with(ts, 4);
    assert_eq!(d.eval(&b).unwrap(), 12 + 2);
    let err = d.eval(&Bindings::new().with(ss, 1)).unwrap_err();
    assert!(matches!(err, SymError::Unbound { sym, .. } if sym == ts));
    assert!(err.to_string().contains("`T`"));
    let err = (&s * &s)
        .eval(&Bindings::new().with(ss, 1 << 40))
        .unwrap_err();
    assert_eq!(err.to_string(), "arithmetic overflow evaluating `S*S`");
    assert_eq!(s.bind(&Bindings::new().with(ss, 4)), Dim::val(4));
    assert_eq!((&s + &t).substitute(ts, &(&s * 2)), 3 * &s);
    assert_eq!((&s + &t).symbols(), vec![ss, ts]);
}

#[test]
fn scope_facts_simplify() {
    let (mut sc, s, t, _) = scope3();
    let (ss, ts) = (s.as_symbol().unwrap(), t.as_symbol().unwrap());
    assert_eq!(sc.canonical(&s.min(&Dim::ZERO)), Dim::ZERO);
    assert_eq!(sc.canonical(&s.max(&Dim::ONE)), s);
    sc.declare_range(ss, 1, 8192).unwrap();
    sc.declare_multiple_of(ss, 8).unwrap();
    assert_eq!(sc.range(ss), (8, 8192));
    assert_eq!(sc.canonical(&s.rem(8).unwrap()), Dim::ZERO);
    assert_eq!(sc.canonical(&(&s + 3).rem(4).unwrap()), Dim::val(3));
    assert_eq!(sc.canonical(&(s.div(8).unwrap() * 8)), s);
    assert_eq!(sc.canonical(&s.div_ceil(8).unwrap()), s.div(8).unwrap());
    assert_eq!(sc.canonical(&s.min(&Dim::val(9000))), s);
    assert_eq!(sc.canonical(&s.div(16384).unwrap()), Dim::ZERO);
    assert!(sc.prove_le(&s, &Dim::val(8192)) && sc.prove_ge(&s, &Dim::val(8)));
    assert!(sc.prove_gt(&(&s + &t), &s) && !sc.prove_ge(&s, &t));
    assert!(sc.prove_eq(&(&s.rem(8).unwrap() + &t), &t));
    assert_eq!(sc.bounds(&(2 * &s + 1)), (17, 16385));
    sc.declare_range(ts, 4, 4).unwrap();
    assert_eq!(sc.canonical(&(&s + &t)), &s + 4);
    // Errors, and the scope is unchanged after them.
    assert!(matches!(
        sc.declare_range(ss, 9, 15),
        Err(SymError::EmptyRange { .. })
    ));
    assert!(matches!(
        sc.declare_multiple_of(ss, 0),
        Err(SymError::BadMultiple { .. })
    ));
    assert_eq!(sc.range(ss), (8, 8192));
    let e = sc.check_binding(ss, 0).unwrap_err().to_string();
    assert_eq!(e, "value 0 for symbol `S` is outside its range 8..=8192");
    let e = sc.check_binding(ss, 12).unwrap_err().to_string();
    assert_eq!(e, "value 12 for symbol `S` is not a multiple of 8");
    sc.check_binding(ss, 16).unwrap();
    let mut b = Bindings::new();
    assert!(sc.bind(&mut b, ss, 9000).is_err() && b.is_empty());
    // A fresh symbol's first declaration may go below the default range.
    let z = sc.symbol("Z").unwrap();
    sc.declare_range(z, 0, 10).unwrap();
    assert_eq!(sc.range(z), (0, 10));
}

#[test]
fn unification_records_equalities() {
    let (mut sc, s, t, u) = scope3();
    let (ss, ts, us) = (
        s.as_symbol().unwrap(),
        t.as_symbol().unwrap(),
        u.as_symbol().unwrap(),
    );
    sc.unify(&Dim::val(3), &Dim::val(3)).unwrap();
    assert!(matches!(
        sc.unify(&Dim::val(3), &Dim::val(4)),
        Err(UnifyError::Mismatch { .. })
    ));
    sc.unify(&t, &s).unwrap();
    assert_eq!(sc.canonical(&t), s, "the later symbol is eliminated");
    sc.unify(&u, &(&t + 1)).unwrap();
    assert_eq!(sc.canonical(&(&u - &s)), Dim::ONE);
    assert!(sc.prove_eq(&(&u + &t), &(2 * &s + 1)));
    assert!(matches!(sc.unify(&u, &s), Err(UnifyError::Mismatch { .. })));
    assert!(matches!(
        sc.unify(&(2 * &s), &Dim::val(7)),
        Err(UnifyError::Mismatch { .. })
    ));
    let before = sc.clone();
    let err = sc.unify(&(&s * &t), &Dim::val(128)).unwrap_err();
    assert!(matches!(err, UnifyError::Unsolvable { .. }), "{err}");
    sc.unify(&(2 * &u), &Dim::val(8)).unwrap();
    assert_eq!(sc.canonical(&(&s + &t + &u)), Dim::val(10));
    assert!(sc.prove_eq(&s, &Dim::val(3)));
    assert_eq!(before.canonical(&u), &s + 1);
    let eqs: Vec<_> = sc.equalities().map(|(k, v)| (k, v.to_string())).collect();
    assert_eq!(
        eqs,
        vec![
            (ss, "3".to_string()),
            (ts, "3".to_string()),
            (us, "4".to_string())
        ]
    );
}

#[test]
fn unification_respects_ranges() {
    let (mut sc, s, t, u) = scope3();
    let (ss, ts, us) = (
        s.as_symbol().unwrap(),
        t.as_symbol().unwrap(),
        u.as_symbol().unwrap(),
    );
    let err = sc.unify(&s, &Dim::ZERO).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "symbol `S` would have to equal `0`, outside its range 1..={}",
            i64::MAX
        )
    );
    let err = sc.unify(&s, &(2 * &s)).unwrap_err();
    assert!(
        matches!(err, UnifyError::OutOfRange { sym, .. } if sym == ss),
        "{err}"
    );
    sc.declare_range(ss, 1, 10).unwrap();
    sc.unify(&(&t + 5), &s).unwrap();
    assert_eq!(sc.canonical(&t), &s - 5, "the later symbol is eliminated");
    assert_eq!(sc.range(ss), (6, 10), "T >= 1 narrows S");
    let err = sc.unify(&t, &Dim::val(7)).unwrap_err();
    assert!(
        matches!(err, UnifyError::OutOfRange { sym, .. } if sym == ss),
        "{err}"
    );
    assert!(sc.declare_range(ts, 6, 9).is_err());
    sc.declare_multiple_of(us, 4).unwrap();
    let err = sc.unify(&u, &(2 * &s + 1)).unwrap_err();
    assert!(
        matches!(err, UnifyError::NotMultiple { sym, .. } if sym == us),
        "{err}"
    );
    sc.unify(&u, &(2 * &s)).unwrap();
    assert_eq!(sc.multiple_of(ss), 2);
    assert_eq!(sc.range(ss), (6, 10));
    assert_eq!(sc.canonical(&(&u - &t).rem(2).unwrap()), Dim::ONE);
    // Bindings flow through the equalities, both ways.
    let mut b = Bindings::new().with(ss, 8);
    sc.complete_bindings(&mut b).unwrap();
    assert_eq!((b.get(ts), b.get(us)), (Some(3), Some(16)));
    let mut b = Bindings::new().with(ts, 3).with(us, 8);
    let err = sc.complete_bindings(&mut b).unwrap_err();
    assert!(
        matches!(err, SymError::Inconsistent { sym, .. } if sym == us),
        "{err}"
    );
    let mut b = Bindings::new().with(us, 6);
    assert!(sc.complete_bindings(&mut b).is_err());
}

#[test]
fn broadcasting() {
    let (mut sc, s, t, _) = scope3();
    let one = Dim::ONE;
    assert_eq!(sc.broadcast(&one, &s).unwrap(), s);
    assert_eq!(sc.broadcast(&s, &one).unwrap(), s);
    assert_eq!(sc.broadcast(&(&s + &s), &(2 * &s)).unwrap(), 2 * &s);
    assert!(matches!(
        sc.broadcast(&Dim::val(2), &Dim::val(3)),
        Err(UnifyError::BroadcastMismatch { .. })
    ));
    assert!(matches!(
        sc.broadcast(&(&s + 1), &(&s + 2)),
        Err(UnifyError::BroadcastMismatch { .. })
    ));
    let err = sc.broadcast(&s, &t).unwrap_err();
    assert!(matches!(err, UnifyError::BroadcastUndecided { .. }));
    assert!(err.to_string().contains("`S`") && err.to_string().contains("`T`"));
    assert_eq!(sc.broadcast_unify(&s, &t).unwrap(), s);
    assert_eq!(sc.canonical(&t), s);
    assert_eq!(sc.broadcast(&t, &s).unwrap(), s);
}

#[test]
fn symbols_and_names() {
    let mut sc = SymbolScope::new();
    let a = sc.symbol("batch").unwrap();
    assert_eq!(sc.symbol("batch").unwrap(), a);
    assert_eq!(SymbolScope::new().symbol("batch").unwrap(), a);
    assert_eq!(sc.lookup("batch"), Some(a));
    assert_eq!(a.name(), "batch");
    for bad in ["", "1x", "min", "a-b", "ü", &"x".repeat(65)] {
        assert!(
            matches!(sc.symbol(bad), Err(SymError::InvalidName { .. })),
            "{bad}"
        );
    }
}

#[test]
fn everything_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Dim>();
    check::<Symbol>();
    check::<SymbolScope>();
    check::<Bindings>();
    check::<SymError>();
    check::<UnifyError>();
    assert!(std::mem::size_of::<Dim>() <= 32);
}

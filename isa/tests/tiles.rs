//! Which kernels' tiles may run on several cores at once
//! (`VerifiedKernel::tiles_independent`), on assembled kernels: stores,
//! atomic adds, in-place updates, parallel bodies and sequence stages.

use dvm_isa::asm::assemble;
use dvm_isa::{verify_kernel, DeviceLimits, Module, TileConflict};

/// A kernel over `x` (in, 64 × 16 f32) and `y` (`y_access`, 64 × 16) of
/// `kind` with the given bodies (each `(grid, code)`).
fn kernel(kind: &str, y_access: &str, bodies: &[(&str, &str)]) -> Vec<u8> {
    let mut text = format!(
        ".module 1.0 features=atomic_add|multi_body\n.kernel \"k\" kind={kind} ub=4096\n  \
         .param \"x\" f32 in dims=[64,16]\n  .param \"y\" f32 {y_access} dims=[64,16]\n"
    );
    for (grid, code) in bodies {
        text.push_str(&format!("  .body grid={grid}\n{code}\n    end\n"));
    }
    text.push_str(".end\n");
    assemble(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn independent(bytes: &[u8]) -> Result<(), TileConflict> {
    let m = Module::parse(bytes).unwrap();
    verify_kernel(&m, 0, &DeviceLimits::DEFAULT)
        .unwrap()
        .tiles_independent()
}

/// A load from `buf` or store to it of a 4 × 16 box per tile, tiles down
/// the rows along grid dimension 0 (`step0` elements apart), at `base`.
fn access(op: &str, buf: u8, base: u64, step0: u64) -> String {
    let pad = if op == "load" { " pad=fill" } else { "" };
    let padv = if op == "load" { " padv=0.0" } else { "" };
    format!(
        "    {op} dt=f32{pad} buf={buf} row_dim=- col_dim=- ub=0 pitch=16 rows=4 cols=16 row_total=4 \
         col_total=16{padv} base={base} step0={step0} step1=0 step2=0 row_stride=16 col_stride=1"
    )
}

#[test]
fn row_tiles_are_independent() {
    let code = [access("load", 0, 0, 64), access("store", 1, 0, 64)].join("\n");
    assert_eq!(
        independent(&kernel("vector", "out", &[("16,1,1", &code)])),
        Ok(())
    );
}

#[test]
fn tiles_storing_the_same_box_are_not() {
    // Every tile stores rows 0..4: the last to run wins, so which one does
    // depends on the split.
    let code = [access("load", 0, 0, 64), access("store", 1, 0, 0)].join("\n");
    assert_eq!(
        independent(&kernel("vector", "out", &[("16,1,1", &code)])),
        Err(TileConflict::SelfOverlap { body: 0, param: 1 })
    );
    // Overlapping by one row, the same.
    let code = [access("load", 0, 0, 64), access("store", 1, 0, 48)].join("\n");
    assert!(independent(&kernel("vector", "out", &[("16,1,1", &code)])).is_err());
}

#[test]
fn atomic_adds_into_the_same_box_are() {
    let add = access("store", 1, 0, 0).replace("store ", "store_add ");
    let code = [access("load", 0, 0, 64), add.clone()].join("\n");
    assert_eq!(
        independent(&kernel("vector", "out", &[("16,1,1", &code)])),
        Ok(())
    );
    // But not when a tile also loads what the others add to.
    let code = [access("load", 1, 0, 0), add].join("\n");
    assert_eq!(
        independent(&kernel("vector", "inout", &[("16,1,1", &code)])),
        Err(TileConflict::SelfOverlap { body: 0, param: 1 })
    );
}

#[test]
fn in_place_updates_of_the_own_box_are() {
    let code = [access("load", 1, 0, 64), access("store", 1, 0, 64)].join("\n");
    assert_eq!(
        independent(&kernel("vector", "inout", &[("16,1,1", &code)])),
        Ok(())
    );
    // Reading the next row too (a halo) meets the next tile's store.
    let code = [access("load", 1, 16, 64), access("store", 1, 0, 64)].join("\n");
    assert_eq!(
        independent(&kernel("vector", "inout", &[("15,1,1", &code)])),
        Err(TileConflict::Overlap {
            body: 0,
            other: 0,
            param: 1
        })
    );
}

#[test]
fn parallel_bodies_must_write_apart() {
    // Two bodies, each storing half of y's rows: apart.
    let top = [access("load", 0, 0, 64), access("store", 1, 0, 64)].join("\n");
    let bottom = [access("load", 0, 512, 64), access("store", 1, 512, 64)].join("\n");
    let halves = [("8,1,1", top.as_str()), ("8,1,1", bottom.as_str())];
    assert_eq!(independent(&kernel("parallel", "out", &halves)), Ok(()));
    // Both storing the top half: tiles of different bodies collide.
    let both = [("8,1,1", top.as_str()), ("8,1,1", top.as_str())];
    assert_eq!(
        independent(&kernel("parallel", "out", &both)),
        Err(TileConflict::Overlap {
            body: 0,
            other: 1,
            param: 1
        })
    );
    // As the stages of a sequence kernel, barriers keep them apart.
    assert_eq!(independent(&kernel("sequence", "out", &both)), Ok(()));
}

#[test]
fn read_only_buffers_may_be_read_by_every_tile() {
    let code = [access("load", 0, 0, 0), access("store", 1, 0, 64)].join("\n");
    assert_eq!(
        independent(&kernel("vector", "out", &[("16,1,1", &code)])),
        Ok(())
    );
}

#[test]
fn more_write_groups_than_the_tracker_holds_are_refused() {
    // 17 bodies of one tile, each storing two boxes: 34 groups, over
    // `MAX_GROUPS` (32); the refusal names the body where it ran out.
    let code = [access("store", 1, 0, 0), access("store", 1, 64, 0)].join("\n");
    let bodies: Vec<(&str, &str)> = (0..17).map(|_| ("1,1,1", code.as_str())).collect();
    assert_eq!(dvm_isa::tiles::MAX_GROUPS, 32);
    assert_eq!(
        independent(&kernel("parallel", "out", &bodies)),
        Err(TileConflict::TooManyAccesses { body: 16 })
    );
    // 16 such bodies fit, and then their overlap is what is reported.
    assert_eq!(
        independent(&kernel("parallel", "out", &bodies[..16])),
        Err(TileConflict::Overlap {
            body: 0,
            other: 1,
            param: 1
        })
    );
}

//! Simulator specs by name: the presets and JSON spec files
//! (`--spec NAME|FILE`, written by `dvm calibrate`).

use std::path::Path;

use dvm_device::sim::spec::{CUBE_TYPES, WIDTHS};
use dvm_device::sim::{DeviceSpec, VectorClass};
use serde_json::{json, Map, Value};

/// A spec with the name reports show.
#[derive(Clone, Debug, PartialEq)]
pub struct SimSpec {
    /// A preset's name or the file's `name` field.
    pub name: String,
    /// The device.
    pub spec: DeviceSpec,
}

/// The presets: name, one line of help, spec.
pub const PRESETS: &[(&str, &str, DeviceSpec)] = &[
    (
        "910b",
        "an Ascend 910B-class NPU from public figures (docs/simulator.md)",
        DeviceSpec::ASCEND_910B,
    ),
    (
        "cpu",
        "a generic CPU running the VM, the starting point of `dvm calibrate`",
        DeviceSpec::GENERIC_CPU,
    ),
];

/// Why a spec could not be had.
#[derive(Debug, thiserror::Error)]
#[error("spec `{source_name}`: {what}")]
pub struct SpecFileError {
    /// The preset name or file given.
    pub source_name: String,
    /// What is wrong.
    pub what: String,
}

impl SimSpec {
    /// The 910B-class preset.
    pub fn default_preset() -> SimSpec {
        SimSpec {
            name: PRESETS[0].0.to_string(),
            spec: PRESETS[0].2,
        }
    }

    /// A preset by name, else the spec file at that path.
    ///
    /// # Errors
    /// [`SpecFileError`] when the name is no preset and the file cannot be
    /// read or is not a valid spec ([`SimSpec::from_json`]).
    pub fn resolve(name_or_path: &str) -> Result<SimSpec, SpecFileError> {
        if let Some((name, _, spec)) = PRESETS.iter().find(|p| p.0 == name_or_path) {
            return Ok(SimSpec {
                name: name.to_string(),
                spec: *spec,
            });
        }
        let bad = |what: String| SpecFileError {
            source_name: name_or_path.to_string(),
            what,
        };
        let path = Path::new(name_or_path);
        let bytes = dvm_tensor::input::read_limited(path, 1 << 20).map_err(|e| {
            let presets: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
            bad(format!(
                "not a preset ({}) and not a readable file: {e}",
                presets.join(", ")
            ))
        })?;
        let text = std::str::from_utf8(&bytes).map_err(|_| bad("not UTF-8 text".into()))?;
        SimSpec::from_json(text).map_err(bad)
    }

    /// Parses a spec file: a JSON object with every field of
    /// [`DeviceSpec`] (as [`SimSpec::to_json`] writes it) and a `name`.
    ///
    /// # Errors
    /// A message naming the missing, unknown or mistyped field, or the
    /// field out of range ([`DeviceSpec::check`]).
    pub fn from_json(text: &str) -> Result<SimSpec, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let obj = v.as_object().ok_or("not a JSON object")?;
        let known = [
            "name",
            "cores",
            "clock_hz",
            "ub_bytes",
            "gm_bytes_per_cycle",
            "core_gm_bytes_per_cycle",
            "gm_latency",
            "transfer_setup",
            "transfer_row_cycles",
            "vector_lanes",
            "vector_issue",
            "cube_macs",
            "cube_issue",
            "dispatch",
            "queue_depth",
            "serial",
            "launch",
            "barrier",
        ];
        if let Some(k) = obj.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(format!("unknown field `{k}`"));
        }
        let field = |k: &str| obj.get(k).ok_or(format!("missing field `{k}`"));
        let num = |k: &str| {
            field(k)?
                .as_f64()
                .ok_or(format!("field `{k}` must be a number"))
        };
        let int = |k: &str| {
            field(k)?
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .ok_or(format!("field `{k}` must be an integer from 0 to 2^32 - 1"))
        };
        let rates = |k: &str, v: &Value| -> Result<[f64; 3], String> {
            let a = v
                .as_array()
                .filter(|a| a.len() == 3)
                .ok_or(format!("`{k}` must be an array of 3 numbers"))?;
            let mut out = [0.0; 3];
            for (o, x) in out.iter_mut().zip(a) {
                *o = x.as_f64().ok_or(format!("`{k}` must hold numbers"))?;
            }
            Ok(out)
        };
        let lanes_obj = field("vector_lanes")?
            .as_object()
            .ok_or("field `vector_lanes` must be an object of the op classes")?;
        let mut vector_lanes = [[0.0; 3]; 4];
        for class in VectorClass::ALL {
            let key = format!("vector_lanes.{}", class.name());
            let v = lanes_obj
                .get(class.name())
                .ok_or(format!("missing field `{key}`"))?;
            vector_lanes[class as usize] = rates(&key, v)?;
        }
        if let Some(k) = lanes_obj
            .keys()
            .find(|k| !VectorClass::ALL.iter().any(|c| c.name() == k.as_str()))
        {
            return Err(format!("unknown field `vector_lanes.{k}`"));
        }
        let cube_obj = field("cube_macs")?
            .as_object()
            .ok_or("field `cube_macs` must be an object of the input types")?;
        let mut cube_macs = [0.0; 3];
        for (i, t) in CUBE_TYPES.iter().enumerate() {
            cube_macs[i] = cube_obj
                .get(*t)
                .and_then(Value::as_f64)
                .ok_or(format!("field `cube_macs.{t}` must be a number"))?;
        }
        if let Some(k) = cube_obj.keys().find(|k| !CUBE_TYPES.contains(&k.as_str())) {
            return Err(format!("unknown field `cube_macs.{k}`"));
        }
        let spec = DeviceSpec {
            cores: int("cores")?,
            clock_hz: num("clock_hz")?,
            ub_bytes: int("ub_bytes")?,
            gm_bytes_per_cycle: num("gm_bytes_per_cycle")?,
            core_gm_bytes_per_cycle: num("core_gm_bytes_per_cycle")?,
            gm_latency: int("gm_latency")?,
            transfer_setup: int("transfer_setup")?,
            transfer_row_cycles: num("transfer_row_cycles")?,
            vector_lanes,
            vector_issue: int("vector_issue")?,
            cube_macs,
            cube_issue: int("cube_issue")?,
            dispatch: int("dispatch")?,
            queue_depth: int("queue_depth")?,
            serial: field("serial")?
                .as_bool()
                .ok_or("field `serial` must be true or false")?,
            launch: int("launch")?,
            barrier: int("barrier")?,
        };
        spec.check().map_err(|e| e.to_string())?;
        let name = match obj.get("name") {
            Some(n) => n
                .as_str()
                .ok_or("field `name` must be a string")?
                .to_string(),
            None => return Err("missing field `name`".into()),
        };
        Ok(SimSpec { name, spec })
    }

    /// The spec as a JSON spec file (pretty-printed).
    pub fn to_json(&self) -> String {
        let s = &self.spec;
        let mut lanes = Map::new();
        for class in VectorClass::ALL {
            lanes.insert(class.name().into(), json!(s.vector_lanes[class as usize]));
        }
        let mut cube = Map::new();
        for (i, t) in CUBE_TYPES.iter().enumerate() {
            cube.insert((*t).into(), json!(s.cube_macs[i]));
        }
        let v = json!({
            "name": self.name,
            "cores": s.cores,
            "clock_hz": s.clock_hz,
            "ub_bytes": s.ub_bytes,
            "gm_bytes_per_cycle": s.gm_bytes_per_cycle,
            "core_gm_bytes_per_cycle": s.core_gm_bytes_per_cycle,
            "gm_latency": s.gm_latency,
            "transfer_setup": s.transfer_setup,
            "transfer_row_cycles": s.transfer_row_cycles,
            "vector_lanes": lanes,
            "vector_issue": s.vector_issue,
            "cube_macs": cube,
            "cube_issue": s.cube_issue,
            "dispatch": s.dispatch,
            "queue_depth": s.queue_depth,
            "serial": s.serial,
            "launch": s.launch,
            "barrier": s.barrier,
        });
        let mut text = serde_json::to_string_pretty(&v).unwrap_or_default();
        text.push('\n');
        text
    }

    /// One line: name, cores, clock, UB and bandwidth.
    pub fn summary(&self) -> String {
        let s = &self.spec;
        format!(
            "{}: {} core(s) at {:.2} GHz, UB {} KiB, global memory {:.1} GB/s shared, {:.1} GB/s per core{}",
            self.name,
            s.cores,
            s.clock_hz / 1e9,
            s.ub_bytes / 1024,
            s.gm_bytes_per_cycle * s.clock_hz / 1e9,
            s.core_gm_bytes_per_cycle * s.clock_hz / 1e9,
            if s.serial { ", one instruction at a time" } else { "" }
        )
    }
}

/// Element widths as spec files name them (for documentation).
pub const WIDTH_NAMES: [&str; 3] = ["1-byte", "2-byte", "4-byte"];

const _: () = assert!(WIDTHS.len() == WIDTH_NAMES.len());

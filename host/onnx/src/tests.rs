//! Import unit tests on models built here with the generated messages.

use dvm_graph::{Graph, Op};
use dvm_isa::{DType, Opcode};
use dvm_tensor::Tensor;
use prost::Message;

use crate::proto::{
    attribute_proto::AttributeType, tensor_proto::DataLocation, tensor_shape_proto, type_proto,
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto,
    TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use crate::value::elem;
use crate::{OnnxError, OnnxModel};

fn vi(name: &str, et: i32, dims: &[&str]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            value: match d.parse::<i64>() {
                Ok(v) => Some(tensor_shape_proto::dimension::Value::DimValue(v)),
                Err(_) if *d == "?" => None,
                Err(_) => Some(tensor_shape_proto::dimension::Value::DimParam(
                    (*d).to_owned(),
                )),
            },
            denotation: None,
        })
        .collect();
    ValueInfoProto {
        name: Some(name.to_owned()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(et),
                shape: Some(TensorShapeProto { dim }),
            })),
            denotation: None,
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.to_owned()),
        name: Some(format!("{op}_{}", outputs[0])),
        input: inputs.iter().map(|s| (*s).to_owned()).collect(),
        output: outputs.iter().map(|s| (*s).to_owned()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

fn attr_i(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_owned()),
        i: Some(v),
        r#type: Some(AttributeType::Int as i32),
        ..Default::default()
    }
}

fn ints(name: &str, dims: &[i64], v: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.to_owned()),
        dims: dims.to_vec(),
        data_type: Some(elem::INT64),
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

fn floats(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.to_owned()),
        dims: dims.to_vec(),
        data_type: Some(elem::FLOAT),
        float_data: v.to_vec(),
        ..Default::default()
    }
}

fn model_bytes(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    inits: Vec<TensorProto>,
    opset: i64,
) -> Vec<u8> {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(GraphProto {
            node: nodes,
            name: Some("test".to_owned()),
            initializer: inits,
            input: inputs,
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn import(bytes: &[u8]) -> Result<Graph, OnnxError> {
    OnnxModel::from_bytes(bytes, None)?.to_graph()
}

fn out_shape(g: &Graph, name: &str) -> String {
    let (_, id) = g.outputs().iter().find(|(n, _)| n == name).expect("output");
    g.shape_string(*id)
}

#[test]
fn dim_params_become_symbols_and_unnamed_dims_fresh_ones() {
    let bytes = model_bytes(
        vec![node("Relu", &["x"], &["y"], vec![])],
        vec![vi("x", elem::FLOAT, &["batch", "?", "64"])],
        vec![vi("y", elem::FLOAT, &["batch", "?", "64"])],
        vec![],
        17,
    );
    let g = import(&bytes).unwrap();
    assert_eq!(g.shape_string(g.inputs()[0]), "[batch, unk_x_1, 64]");
    assert_eq!(out_shape(&g, "y"), "[batch, unk_x_1, 64]");
}

#[test]
fn derived_dims_are_expressions_over_input_symbols() {
    let bytes = model_bytes(
        vec![node("Identity", &["m"], &["y"], vec![])],
        vec![
            vi("x", elem::FLOAT, &["batch", "seq"]),
            vi("m", elem::FLOAT, &["4*batch", "batch*seq", "seq+1"]),
        ],
        vec![vi("y", elem::FLOAT, &["4*batch", "batch*seq", "seq+1"])],
        vec![],
        18,
    );
    let g = import(&bytes).unwrap();
    assert_eq!(g.shape_string(g.inputs()[1]), "[4*batch, batch*seq, seq+1]");
    // Shapes that agree with the symbols bind; a contradiction is an error
    // naming the input.
    let x = Tensor::zeros(DType::F32, &[2, 3]).unwrap();
    let good = Tensor::zeros(DType::F32, &[8, 6, 4]).unwrap();
    let bad = Tensor::zeros(DType::F32, &[8, 6, 5]).unwrap();
    let b = dvm_sym::Bindings::new();
    g.bind_tensors(&[("x", &x), ("m", &good)], &b).unwrap();
    let e = g.bind_tensors(&[("x", &x), ("m", &bad)], &b).unwrap_err();
    assert!(e.to_string().contains('m'), "{e}");
}

#[test]
fn shape_arithmetic_folds_to_symbolic_reshapes() {
    // TorchScript style: Shape, Gather, Unsqueeze, Concat, Div, Reshape.
    let nodes = vec![
        node("Shape", &["x"], &["s"], vec![]),
        node("Gather", &["s", "i0"], &["b"], vec![attr_i("axis", 0)]),
        node("Gather", &["s", "i1"], &["t"], vec![attr_i("axis", 0)]),
        node("Gather", &["s", "i2"], &["h"], vec![attr_i("axis", 0)]),
        node("Div", &["h", "heads"], &["hd"], vec![]),
        node("Unsqueeze", &["b", "ax0"], &["b1"], vec![]),
        node("Unsqueeze", &["t", "ax0"], &["t1"], vec![]),
        node("Unsqueeze", &["hd", "ax0"], &["hd1"], vec![]),
        node(
            "Concat",
            &["b1", "t1", "heads1", "hd1"],
            &["shape"],
            vec![attr_i("axis", 0)],
        ),
        node("Reshape", &["x", "shape"], &["y"], vec![]),
        // Dynamo style: Shape(start, end), Reshape with 0 and -1.
        node(
            "Shape",
            &["x"],
            &["s01"],
            vec![attr_i("start", 0), attr_i("end", 1)],
        ),
        node(
            "Concat",
            &["s01", "minus1"],
            &["flat"],
            vec![attr_i("axis", 0)],
        ),
        node("Reshape", &["x", "flat"], &["z"], vec![]),
        node("Reshape", &["x", "zero_m1"], &["w"], vec![]),
        // Mul on shapes, ConstantOfShape, Expand.
        node("Mul", &["t1", "two"], &["t2"], vec![]),
        node("ConstantOfShape", &["one1"], &["ones"], vec![]),
        node("Expand", &["ones", "s"], &["e"], vec![]),
    ];
    let inits = vec![
        ints("i0", &[], &[0]),
        ints("i1", &[], &[1]),
        ints("i2", &[], &[-1]),
        ints("heads", &[], &[4]),
        ints("heads1", &[1], &[4]),
        ints("ax0", &[1], &[0]),
        ints("minus1", &[1], &[-1]),
        ints("zero_m1", &[2], &[0, -1]),
        ints("two", &[1], &[2]),
        ints("one1", &[1], &[1]),
    ];
    let bytes = model_bytes(
        nodes,
        vec![vi("x", elem::FLOAT, &["batch", "seq", "64"])],
        vec![
            vi("y", elem::FLOAT, &["batch", "seq", "4", "16"]),
            vi("z", elem::FLOAT, &["batch", "?"]),
            vi("w", elem::FLOAT, &["batch", "?"]),
            vi("t2", elem::INT64, &["1"]),
            vi("e", elem::FLOAT, &["batch", "seq", "64"]),
        ],
        inits,
        17,
    );
    let g = import(&bytes).unwrap();
    assert_eq!(out_shape(&g, "y"), "[batch, seq, 4, 16]");
    assert_eq!(out_shape(&g, "z"), "[batch, 64*seq]");
    assert_eq!(out_shape(&g, "w"), "[batch, 64*seq]");
    // A symbolic shape vector as an output is computed at run time.
    assert_eq!(out_shape(&g, "t2"), "[1]");
    assert_eq!(out_shape(&g, "e"), "[batch, seq, 64]");
    // No Shape/Gather/Concat reached the graph: only reshapes of x.
    let reshapes = g.nodes().iter().filter(|n| n.op == Op::Reshape).count();
    assert_eq!(reshapes, 3);
}

#[test]
fn gelu_written_as_primitives_becomes_gelu() {
    let nodes = vec![
        node("Div", &["x", "sqrt2"], &["d"], vec![]),
        node("Erf", &["d"], &["e"], vec![]),
        node("Add", &["e", "one"], &["a"], vec![]),
        node("Mul", &["x", "a"], &["m"], vec![]),
        node("Mul", &["m", "half"], &["y"], vec![]),
    ];
    let inits = vec![
        floats("sqrt2", &[], &[std::f32::consts::SQRT_2]),
        floats("one", &[], &[1.0]),
        floats("half", &[], &[0.5]),
    ];
    let bytes = model_bytes(
        nodes,
        vec![vi("x", elem::FLOAT, &["n", "8"])],
        vec![vi("y", elem::FLOAT, &["n", "8"])],
        inits,
        17,
    );
    let g = import(&bytes).unwrap();
    let ops: Vec<&Op> = g.nodes().iter().map(|n| &n.op).collect();
    assert_eq!(ops, [&Op::Input, &Op::Unary(Opcode::GeluErf)]);
}

#[test]
fn truncated_and_foreign_files_are_decode_errors() {
    let bytes = model_bytes(
        vec![node("Relu", &["x"], &["y"], vec![])],
        vec![vi("x", elem::FLOAT, &["n"])],
        vec![vi("y", elem::FLOAT, &["n"])],
        vec![],
        17,
    );
    let e = import(&bytes[..bytes.len() - 3]).unwrap_err();
    assert!(matches!(e, OnnxError::Decode { .. }), "{e}");
    let e = import(br#"{"inputs": []}"#).unwrap_err();
    assert!(matches!(e, OnnxError::Decode { .. }), "{e}");
    let e = import(b"").unwrap_err();
    assert!(matches!(e, OnnxError::Decode { .. }), "{e}");
}

#[test]
fn unsupported_opset_is_an_error() {
    let bytes = model_bytes(vec![], vec![], vec![], vec![], 12);
    let e = import(&bytes).unwrap_err();
    assert!(matches!(e, OnnxError::Opset { version: 12, .. }), "{e}");
    assert!(e.to_string().contains("13 to 25"), "{e}");
}

#[test]
fn unsupported_ops_are_all_listed_with_index_name_and_opset() {
    let bytes = model_bytes(
        vec![
            node("Relu", &["x"], &["a"], vec![]),
            node("LpPool", &["a"], &["b"], vec![]),
            node("GatherElements", &["b", "w"], &["y"], vec![]),
        ],
        vec![vi("x", elem::FLOAT, &["n", "3", "8", "8"])],
        vec![vi("y", elem::FLOAT, &["n", "3", "8", "8"])],
        vec![floats("w", &[1], &[1.0])],
        18,
    );
    let e = import(&bytes).unwrap_err();
    let OnnxError::Unsupported { opset, nodes } = &e else {
        panic!("{e}");
    };
    assert_eq!(*opset, 18);
    let found: Vec<(usize, &str, &str)> = nodes
        .iter()
        .map(|n| (n.index, n.name.as_str(), n.op_type.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (1, "LpPool_b", "LpPool"),
            (2, "GatherElements_y", "GatherElements")
        ]
    );
    let text = e.to_string();
    assert!(
        text.contains("opset 18") && text.contains("node 1 `LpPool_b` (LpPool)"),
        "{text}"
    );
}

#[test]
fn gather_with_runtime_indices_is_the_graphs_gather() {
    // An embedding lookup of int64 ids, and a run-time tensor gathered by
    // constant indices along its last axis.
    let table: Vec<f32> = (0..8).map(|v| v as f32).collect();
    let bytes = model_bytes(
        vec![
            node("Gather", &["table", "ids"], &["y"], vec![]),
            node("Gather", &["y", "pick"], &["z"], vec![attr_i("axis", -1)]),
        ],
        vec![vi("ids", elem::INT64, &["n"])],
        vec![
            vi("y", elem::FLOAT, &["n", "4"]),
            vi("z", elem::FLOAT, &["n"]),
        ],
        vec![floats("table", &[2, 4], &table), ints("pick", &[], &[-1])],
        17,
    );
    let g = import(&bytes).unwrap();
    let y = g.find("y").unwrap();
    assert_eq!(g[y].op, dvm_graph::Op::Gather { axis: 0 });
    assert_eq!(g.shape_string(y), "[n, 4]");
    let ids_id = g.find("ids").unwrap();
    assert_eq!(g[ids_id].dtype, dvm_isa::DType::I32);
    let ids = Tensor::from_f64(dvm_isa::DType::I32, &[3], &[1.0, 0.0, -1.0]).unwrap();
    let out = eval(&g, &[("ids", &ids)]);
    assert_eq!(
        out[0].1.to_f32_vec(),
        [4.0, 5.0, 6.0, 7.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    );
    assert_eq!(out[1].1.to_f32_vec(), [7.0, 3.0, 7.0]);
}

#[test]
fn a_missing_initializer_names_the_value_and_node() {
    let bytes = model_bytes(
        vec![node("Add", &["x", "bias"], &["y"], vec![])],
        vec![vi("x", elem::FLOAT, &["n"])],
        vec![vi("y", elem::FLOAT, &["n"])],
        vec![],
        17,
    );
    let e = import(&bytes).unwrap_err();
    assert!(
        matches!(&e, OnnxError::MissingValue { value, index: 0, .. } if value == "bias"),
        "{e}"
    );
}

fn external(location: &str) -> TensorProto {
    TensorProto {
        name: Some("w".to_owned()),
        dims: vec![4],
        data_type: Some(elem::FLOAT),
        data_location: Some(DataLocation::External as i32),
        external_data: vec![
            StringStringEntryProto {
                key: Some("location".to_owned()),
                value: Some(location.to_owned()),
            },
            StringStringEntryProto {
                key: Some("offset".to_owned()),
                value: Some("4".to_owned()),
            },
        ],
        ..Default::default()
    }
}

fn external_model(location: &str) -> Vec<u8> {
    model_bytes(
        vec![node("Add", &["x", "w"], &["y"], vec![])],
        vec![vi("x", elem::FLOAT, &["4"])],
        vec![vi("y", elem::FLOAT, &["4"])],
        vec![external(location)],
        17,
    )
}

#[test]
fn external_data_is_read_from_the_model_folder() {
    let dir = tempfile::tempdir().unwrap();
    let mut data = vec![0u8; 4];
    for v in [1.0f32, 2.0, 3.0, 4.0] {
        data.extend(v.to_le_bytes());
    }
    std::fs::write(dir.path().join("w.bin"), &data).unwrap();
    let path = dir.path().join("m.onnx");
    std::fs::write(&path, external_model("w.bin")).unwrap();
    let g = crate::import(&path).unwrap();
    let w = g
        .nodes()
        .iter()
        .find_map(|n| match &n.op {
            Op::Constant(v) => Some(v.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(w, [1.0, 2.0, 3.0, 4.0]);

    // Missing, too short, or outside the folder: errors naming the tensor.
    std::fs::write(&path, external_model("nope.bin")).unwrap();
    let e = crate::import(&path).unwrap_err();
    assert!(
        matches!(&e, OnnxError::TensorData { tensor, .. } if tensor == "w"),
        "{e}"
    );
    std::fs::write(dir.path().join("short.bin"), [0u8; 8]).unwrap();
    std::fs::write(&path, external_model("short.bin")).unwrap();
    let e = crate::import(&path).unwrap_err();
    assert!(e.to_string().contains("holds 8 bytes"), "{e}");
    std::fs::write(&path, external_model("../w.bin")).unwrap();
    let e = crate::import(&path).unwrap_err();
    assert!(e.to_string().contains("outside the model's folder"), "{e}");
    std::fs::write(&path, external_model("/etc/passwd")).unwrap();
    let e = crate::import(&path).unwrap_err();
    assert!(e.to_string().contains("outside the model's folder"), "{e}");
}

#[test]
fn a_declared_output_shape_the_import_contradicts_is_an_error() {
    let bytes = model_bytes(
        vec![node("Relu", &["x"], &["y"], vec![])],
        vec![vi("x", elem::FLOAT, &["n", "8"])],
        vec![vi("y", elem::FLOAT, &["n", "9"])],
        vec![],
        17,
    );
    let e = import(&bytes).unwrap_err();
    assert!(
        matches!(&e, OnnxError::Declaration { kind: "output", name, .. } if name == "y"),
        "{e}"
    );
}

/// Runs `g` on the f64 reference evaluator.
fn eval(g: &Graph, inputs: &[(&str, &Tensor)]) -> Vec<(String, Tensor)> {
    dvm_graph::reference::run(g, inputs, &dvm_sym::Bindings::new()).unwrap()
}

#[test]
fn equal_and_where_on_shape_vectors_fold_as_pytorch_emits_them() {
    // `x.expand(-1, 3, -1)` as the TorchScript exporter writes it:
    // Where(Equal(shape, -1), ones, shape), then Expand.
    let nodes = vec![
        node("Shape", &["x"], &["s"], vec![]),
        node("Gather", &["s", "i0"], &["n"], vec![]),
        node("Unsqueeze", &["n", "ax0"], &["n1"], vec![]),
        node(
            "Concat",
            &["n1", "three", "m1"],
            &["want"],
            vec![attr_i("axis", 0)],
        ),
        node("Equal", &["want", "m1s"], &["is_m1"], vec![]),
        node("Where", &["is_m1", "ones", "want"], &["target"], vec![]),
        node("Expand", &["x", "target"], &["y"], vec![]),
        // A symbolic count as a float: the mean over the batch.
        node(
            "Cast",
            &["n"],
            &["nf"],
            vec![attr_i("to", elem::FLOAT as i64)],
        ),
        node(
            "ReduceSum",
            &["x", "ax0"],
            &["sum"],
            vec![attr_i("keepdims", 0)],
        ),
        node("Div", &["sum", "nf"], &["mean"], vec![]),
    ];
    let inits = vec![
        ints("i0", &[], &[0]),
        ints("ax0", &[1], &[0]),
        ints("three", &[1], &[3]),
        ints("m1", &[1], &[-1]),
        ints("m1s", &[], &[-1]),
        ints("ones", &[3], &[1, 1, 1]),
    ];
    let bytes = model_bytes(
        nodes,
        vec![vi("x", elem::FLOAT, &["n", "1", "2"])],
        vec![
            vi("y", elem::FLOAT, &["n", "3", "2"]),
            vi("mean", elem::FLOAT, &["1", "2"]),
        ],
        inits,
        17,
    );
    let g = import(&bytes).unwrap();
    assert_eq!(out_shape(&g, "y"), "[n, 3, 2]");
    let x = Tensor::from_f32(&[2, 1, 2], &[1.0, 2.0, 5.0, 8.0]).unwrap();
    let out = eval(&g, &[("x", &x)]);
    assert_eq!(out[0].1.shape(), &[2, 3, 2]);
    assert_eq!(
        out[0].1.as_slice::<f32>().unwrap(),
        [1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 5.0, 8.0, 5.0, 8.0, 5.0, 8.0]
    );
    assert_eq!(out[1].1.as_slice::<f32>().unwrap(), [3.0, 5.0]);
}

#[test]
fn split_reduce_axes_input_slice_and_gemm_compute_what_onnx_says() {
    let nodes = vec![
        // Split into sizes [1, 3] (input, opset 13+) and into 2 outputs.
        node(
            "Split",
            &["x", "sizes"],
            &["a", "b"],
            vec![attr_i("axis", 1)],
        ),
        node(
            "Split",
            &["x"],
            &["c", "d"],
            vec![attr_i("axis", 1), attr_i("num_outputs", 2)],
        ),
        // ReduceMax with axes as an input (opset 18).
        node(
            "ReduceMax",
            &["x", "ax1"],
            &["mx"],
            vec![attr_i("keepdims", 0)],
        ),
        // Slice with a symbolic end reaching the end of the axis.
        node("Shape", &["x"], &["s"], vec![]),
        node("Slice", &["s", "one", "two"], &["s1"], vec![]),
        node("Slice", &["x", "one", "s1", "ax1"], &["tail"], vec![]),
        // Gemm: alpha · x · wᵀ + beta · bias.
        node(
            "Gemm",
            &["x", "w", "bias"],
            &["gm"],
            vec![
                attr_i("transB", 1),
                AttributeProto {
                    name: Some("alpha".to_owned()),
                    f: Some(2.0),
                    r#type: Some(AttributeType::Float as i32),
                    ..Default::default()
                },
            ],
        ),
    ];
    let inits = vec![
        ints("sizes", &[2], &[1, 3]),
        ints("ax1", &[1], &[1]),
        ints("one", &[1], &[1]),
        ints("two", &[1], &[2]),
        floats("w", &[1, 4], &[1.0, 0.0, 0.0, -1.0]),
        floats("bias", &[1], &[0.5]),
    ];
    let bytes = model_bytes(
        nodes,
        vec![vi("x", elem::FLOAT, &["n", "4"])],
        ["a", "b", "c", "d", "mx", "tail", "gm"]
            .iter()
            .map(|o| vi(o, elem::FLOAT, &[]))
            .map(|mut v| {
                v.r#type = None;
                v
            })
            .collect(),
        inits,
        18,
    );
    let g = import(&bytes).unwrap();
    let x = Tensor::from_f32(&[2, 4], &[1.0, 2.0, 3.0, 4.0, 8.0, 7.0, 6.0, 5.0]).unwrap();
    let out = eval(&g, &[("x", &x)]);
    let get = |n: &str| {
        let (_, t) = out.iter().find(|(k, _)| k == n).unwrap();
        (t.shape().to_vec(), t.as_slice::<f32>().unwrap().to_vec())
    };
    assert_eq!(get("a"), (vec![2, 1], vec![1.0, 8.0]));
    assert_eq!(get("b"), (vec![2, 3], vec![2.0, 3.0, 4.0, 7.0, 6.0, 5.0]));
    assert_eq!(get("c"), (vec![2, 2], vec![1.0, 2.0, 8.0, 7.0]));
    assert_eq!(get("d"), (vec![2, 2], vec![3.0, 4.0, 6.0, 5.0]));
    assert_eq!(get("mx"), (vec![2], vec![4.0, 8.0]));
    assert_eq!(
        get("tail"),
        (vec![2, 3], vec![2.0, 3.0, 4.0, 7.0, 6.0, 5.0])
    );
    assert_eq!(
        get("gm"),
        (
            vec![2, 1],
            vec![2.0 * (1.0 - 4.0) + 0.5, 2.0 * (8.0 - 5.0) + 0.5]
        )
    );
}

#[test]
fn a_symbolic_slice_end_short_of_the_extent_is_unsupported() {
    // x[:, :n-1] on an axis of extent n: not "to the end", so refused
    // rather than read as it.
    let nodes = vec![
        node("Shape", &["x"], &["s"], vec![]),
        node("Gather", &["s", "i1"], &["n"], vec![]),
        node("Sub", &["n", "one"], &["n1"], vec![]),
        node("Unsqueeze", &["n1", "ax0"], &["end"], vec![]),
        node("Slice", &["x", "zero", "end", "ax1"], &["y"], vec![]),
    ];
    let inits = vec![
        ints("i1", &[], &[1]),
        ints("one", &[], &[1]),
        ints("ax0", &[1], &[0]),
        ints("zero", &[1], &[0]),
        ints("ax1", &[1], &[1]),
    ];
    let bytes = model_bytes(
        nodes,
        vec![vi("x", elem::FLOAT, &["b", "n"])],
        vec![vi("y", elem::FLOAT, &["b", "?"])],
        inits,
        17,
    );
    let e = import(&bytes).unwrap_err();
    let OnnxError::Unsupported { nodes, .. } = &e else {
        panic!("{e}");
    };
    assert_eq!((nodes[0].index, nodes[0].op_type.as_str()), (4, "Slice"));
    assert!(nodes[0].reason.contains("n-1"), "{e}");
}

#[test]
fn opset_23_rms_normalization_and_opset_20_gelu_map_to_composites() {
    let nodes = vec![
        node(
            "RMSNormalization",
            &["x", "w"],
            &["n"],
            vec![AttributeProto {
                name: Some("epsilon".to_owned()),
                f: Some(1e-6),
                r#type: Some(AttributeType::Float as i32),
                ..Default::default()
            }],
        ),
        node(
            "Gelu",
            &["n"],
            &["y"],
            vec![AttributeProto {
                name: Some("approximate".to_owned()),
                s: Some(b"tanh".to_vec()),
                r#type: Some(AttributeType::String as i32),
                ..Default::default()
            }],
        ),
    ];
    let bytes = model_bytes(
        nodes,
        vec![vi("x", elem::FLOAT, &["s", "2"])],
        vec![vi("y", elem::FLOAT, &["s", "2"])],
        vec![floats("w", &[2], &[1.0, 2.0])],
        23,
    );
    let g = import(&bytes).unwrap();
    let names: Vec<&str> = g.nodes().iter().map(|n| n.op.name()).collect();
    assert!(
        names.contains(&"rms_norm") && names.contains(&"gelu_tanh"),
        "{names:?}"
    );
    let x = Tensor::from_f32(&[1, 2], &[3.0, 4.0]).unwrap();
    let out = eval(&g, &[("x", &x)]);
    let rms = ((9.0f64 + 16.0) / 2.0 + 1e-6).sqrt();
    let gelu = |v: f64| {
        0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh())
    };
    let want = [gelu(3.0 / rms), gelu(2.0 * 4.0 / rms)];
    let got = out[0].1.as_slice::<f32>().unwrap();
    for (g, w) in got.iter().zip(want) {
        assert!((f64::from(*g) - w).abs() < 1e-5, "{got:?} vs {want:?}");
    }
}

#[test]
fn clip_with_constant_and_absent_bounds() {
    let bytes = model_bytes(
        vec![
            node("Clip", &["x", "lo", "hi"], &["y"], vec![]),
            node("Clip", &["x", "", "hi"], &["z"], vec![]),
        ],
        vec![vi("x", elem::FLOAT, &["n"])],
        vec![vi("y", elem::FLOAT, &["n"]), vi("z", elem::FLOAT, &["n"])],
        vec![floats("lo", &[], &[0.0]), floats("hi", &[], &[6.0])],
        13,
    );
    let g = import(&bytes).unwrap();
    let x = Tensor::from_f32(&[4], &[-1.0, 2.0, 7.0, 6.5]).unwrap();
    let out = eval(&g, &[("x", &x)]);
    assert_eq!(out[0].1.as_slice::<f32>().unwrap(), [0.0, 2.0, 6.0, 6.0]);
    assert_eq!(out[1].1.as_slice::<f32>().unwrap(), [-1.0, 2.0, 6.0, 6.0]);
}

#[test]
fn softmax_written_as_primitives_becomes_softmax() {
    // With the max subtraction (axis 0) and without (axis -1).
    let nodes = vec![
        node("ReduceMax", &["x", "ax0"], &["m"], vec![]),
        node("Sub", &["x", "m"], &["d"], vec![]),
        node("Exp", &["d"], &["e"], vec![]),
        node("ReduceSum", &["e", "ax0"], &["s"], vec![]),
        node("Div", &["e", "s"], &["y"], vec![]),
        node("Exp", &["x"], &["e2"], vec![]),
        node("ReduceSum", &["e2", "axm1"], &["s2"], vec![]),
        node("Div", &["e2", "s2"], &["z"], vec![]),
    ];
    let bytes = model_bytes(
        nodes,
        vec![vi("x", elem::FLOAT, &["2", "n"])],
        vec![
            vi("y", elem::FLOAT, &["2", "n"]),
            vi("z", elem::FLOAT, &["2", "n"]),
        ],
        vec![ints("ax0", &[1], &[0]), ints("axm1", &[1], &[-1])],
        18,
    );
    let g = import(&bytes).unwrap();
    let ops: Vec<&Op> = g.nodes().iter().map(|n| &n.op).collect();
    assert_eq!(
        ops,
        [
            &Op::Input,
            &Op::Softmax { axis: 0 },
            &Op::Softmax { axis: 1 }
        ]
    );
    let x = Tensor::from_f32(&[2, 2], &[0.0, 1.0, 2.0, 1.0]).unwrap();
    let out = eval(&g, &[("x", &x)]);
    let e2 = std::f32::consts::E.powi(2);
    let y = out[0].1.as_slice::<f32>().unwrap();
    assert!(
        (y[0] - 1.0 / (1.0 + e2)).abs() < 1e-6 && (y[1] - 0.5).abs() < 1e-6,
        "{y:?}"
    );
    let z = out[1].1.as_slice::<f32>().unwrap();
    let e1 = std::f32::consts::E;
    assert!((z[0] - 1.0 / (1.0 + e1)).abs() < 1e-6, "{z:?}");
}

#[test]
fn a_transposed_weight_folds() {
    let bytes = model_bytes(
        vec![
            node("Transpose", &["w"], &["wt"], vec![]),
            node("MatMul", &["x", "wt"], &["y"], vec![]),
        ],
        vec![vi("x", elem::FLOAT, &["n", "3"])],
        vec![vi("y", elem::FLOAT, &["n", "2"])],
        vec![floats("w", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])],
        17,
    );
    let g = import(&bytes).unwrap();
    assert!(!g
        .nodes()
        .iter()
        .any(|n| matches!(n.op, Op::Transpose { .. })));
    let x = Tensor::from_f32(&[1, 3], &[1.0, 0.0, -1.0]).unwrap();
    let out = eval(&g, &[("x", &x)]);
    assert_eq!(out[0].1.as_slice::<f32>().unwrap(), [-2.0, -2.0]);
}

#[test]
fn nodes_without_outputs_are_errors_not_panics() {
    // An Erf and an Exp with no outputs where patterns look for them.
    let mut erf = node("Erf", &["d"], &["e"], vec![]);
    erf.output.clear();
    let mut exp = node("Exp", &["x"], &["q"], vec![]);
    exp.output.clear();
    let bytes = model_bytes(
        vec![node("Div", &["x", "two"], &["d"], vec![]), erf, exp],
        vec![vi("x", elem::FLOAT, &["n"])],
        vec![vi("e", elem::FLOAT, &["n"])],
        vec![floats("two", &[], &[std::f32::consts::SQRT_2])],
        17,
    );
    let e = import(&bytes).unwrap_err();
    assert!(matches!(&e, OnnxError::MissingOutput(n) if n == "e"), "{e}");
}

/// Structural mutations of zoo models (inputs and outputs dropped,
/// attributes cleared, op types swapped, nodes reordered, initializer
/// dims and types changed) import or fail with an error, never a panic.
#[test]
fn structurally_mutated_models_are_errors_not_panics() {
    let zoo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/models");
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n.max(1) as u64) as usize
    };
    let ops: Vec<&str> = crate::ops::TABLE.iter().map(|(n, _)| *n).collect();
    for file in [
        "encoder.ts17.onnx",
        "llama_mlp.dynamo18.onnx",
        "decoder_masked.ts17.onnx",
    ] {
        let bytes = std::fs::read(zoo.join(file)).unwrap();
        let base = ModelProto::decode(bytes.as_slice()).unwrap();
        for _ in 0..300 {
            let mut m = base.clone();
            let g = m.graph.as_mut().unwrap();
            for _ in 0..1 + rnd(3) {
                let k = rnd(g.node.len());
                match rnd(7) {
                    0 => {
                        let n = &mut g.node[k];
                        if !n.input.is_empty() {
                            let i = rnd(n.input.len());
                            n.input.remove(i);
                        }
                    }
                    1 if rnd(2) == 0 => g.node[k].output.clear(),
                    1 => {
                        // An input rewired to another node's output.
                        let j = rnd(g.node.len());
                        let (o, n) = (g.node[j].output.clone(), &mut g.node[k]);
                        if let (Some(src), false) = (o.first(), n.input.is_empty()) {
                            let i = rnd(n.input.len());
                            n.input[i] = src.clone();
                        }
                    }
                    2 => g.node[k].attribute.clear(),
                    3 => g.node[k].op_type = Some(ops[rnd(ops.len())].to_owned()),
                    4 => {
                        let j = rnd(g.node.len());
                        g.node.swap(k, j);
                    }
                    5 if !g.initializer.is_empty() => {
                        let t = rnd(g.initializer.len());
                        let init = &mut g.initializer[t];
                        if !init.dims.is_empty() {
                            let d = rnd(init.dims.len());
                            init.dims[d] = [0, 1, -1, 3, i64::MAX][rnd(5)];
                        }
                    }
                    _ if !g.initializer.is_empty() => {
                        let t = rnd(g.initializer.len());
                        g.initializer[t].data_type = Some([1, 7, 9, 11, 8, 0][rnd(6)]);
                    }
                    _ => {}
                }
            }
            if let Ok(model) = OnnxModel::from_bytes(&m.encode_to_vec(), None) {
                let _ = model.to_graph();
            }
        }
    }
}

#[test]
fn range_of_a_symbolic_limit_and_trilu_compute_what_onnx_says() {
    // `torch.arange(2.0, float(x.shape[0]), 3.0)` and `torch.triu(x, 1)`.
    let nodes = vec![
        node("Shape", &["x"], &["s"], vec![]),
        node("Gather", &["s", "i0"], &["n"], vec![]),
        node(
            "Cast",
            &["n"],
            &["nf"],
            vec![attr_i("to", elem::FLOAT as i64)],
        ),
        node("Range", &["start", "nf", "delta"], &["r"], vec![]),
        node("Trilu", &["x", "one"], &["t"], vec![]),
    ];
    let inits = vec![
        ints("i0", &[], &[0]),
        ints("one", &[], &[1]),
        floats("start", &[], &[2.0]),
        floats("delta", &[], &[3.0]),
    ];
    let bytes = model_bytes(
        nodes,
        vec![vi("x", elem::FLOAT, &["s", "3"])],
        vec![
            vi("r", elem::FLOAT, &["m"]),
            vi("t", elem::FLOAT, &["s", "3"]),
        ],
        inits,
        17,
    );
    let g = import(&bytes).unwrap();
    let x = Tensor::from_f32(&[7, 3], &[1.0; 21]).unwrap();
    let out = eval(&g, &[("x", &x)]);
    assert_eq!(out[0].1.as_slice::<f32>().unwrap(), [2.0, 5.0]);
    let t = out[1].1.as_slice::<f32>().unwrap();
    assert_eq!(&t[..9], [0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
    assert!(t[9..].iter().all(|&v| v == 0.0));
}

#[test]
fn range_with_a_run_time_limit_is_unsupported() {
    let nodes = vec![
        node("ReduceMax", &["x"], &["lim"], vec![attr_i("keepdims", 0)]),
        node("Range", &["start", "lim", "delta"], &["r"], vec![]),
    ];
    let inits = vec![floats("start", &[], &[0.0]), floats("delta", &[], &[1.0])];
    let bytes = model_bytes(
        nodes,
        vec![vi("x", elem::FLOAT, &["4"])],
        vec![vi("r", elem::FLOAT, &["m"])],
        inits,
        17,
    );
    let e = import(&bytes).unwrap_err();
    assert!(
        e.to_string().contains("limit is computed at run time"),
        "{e}"
    );
}

fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_owned()),
        ints: v.to_vec(),
        r#type: Some(AttributeType::Ints as i32),
        ..Default::default()
    }
}

fn attr_s(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_owned()),
        s: Some(v.as_bytes().to_vec()),
        r#type: Some(AttributeType::String as i32),
        ..Default::default()
    }
}

/// A model of one `op` node over `x` `[n, 2, 5, 5]` (and a weight `w`
/// `[4, 1, 3, 3]` and bias `b` `[4]` for `Conv`, inputs `inputs`).
fn window_model(op: &str, inputs: &[&str], attrs: Vec<AttributeProto>, opset: i64) -> Vec<u8> {
    let w: Vec<f32> = (0..36).map(|v| (v % 5) as f32 - 2.0).collect();
    model_bytes(
        vec![node(op, inputs, &["y"], attrs)],
        vec![vi("x", elem::FLOAT, &["n", "2", "5", "5"])],
        vec![vi("y", elem::FLOAT, &["n", "?", "?", "?"])],
        vec![
            floats("w", &[4, 1, 3, 3], &w),
            floats("b", &[4], &[0.5, -0.5, 1.0, 0.0]),
        ],
        opset,
    )
}

#[test]
fn conv_and_pools_import_with_their_attributes() {
    let x: Vec<f32> = (0..100).map(|v| ((v * 7) % 13) as f32 - 6.0).collect();
    let x = Tensor::from_f32(&[2, 2, 5, 5], &x).unwrap();
    // Grouped, strided, padded, dilated conv with a bias.
    let conv = window_model(
        "Conv",
        &["x", "w", "b"],
        vec![
            attr_i("group", 2),
            attr_ints("kernel_shape", &[3, 3]),
            attr_ints("strides", &[2, 1]),
            attr_ints("pads", &[1, 2, 1, 0]),
            attr_ints("dilations", &[1, 2]),
        ],
        17,
    );
    let g = import(&conv).unwrap();
    let y = g.find("y").unwrap();
    let Op::Conv2d(a) = &g[y].op else {
        panic!("{:?}", g[y].op)
    };
    assert_eq!(
        (a.groups, a.strides, a.pads, a.dilations),
        (2, [2, 1], [1, 2, 1, 0], [1, 2])
    );
    assert_eq!(out_shape(&g, "y"), "[n, 4, 3, 3]");
    assert_eq!(eval(&g, &[("x", &x)])[0].1.shape(), &[2, 4, 3, 3]);
    // auto_pad: SAME_UPPER keeps H, W at stride 1; SAME_LOWER puts the
    // odd pad first; VALID pads nothing. No bias.
    for (mode, stride, pads, shape) in [
        ("SAME_UPPER", 1, [1, 1, 1, 1], "[n, 4, 5, 5]"),
        ("SAME_LOWER", 2, [1, 1, 1, 1], "[n, 4, 3, 3]"),
        ("VALID", 1, [0, 0, 0, 0], "[n, 4, 3, 3]"),
    ] {
        let m = window_model(
            "Conv",
            &["x", "w"],
            vec![
                attr_i("group", 2),
                attr_s("auto_pad", mode),
                attr_ints("strides", &[stride, stride]),
            ],
            18,
        );
        let g = import(&m).unwrap();
        let y = g.find("y").unwrap();
        let Op::Conv2d(a) = &g[y].op else {
            panic!("{:?}", g[y].op)
        };
        assert_eq!(a.pads, pads, "{mode}");
        assert_eq!(out_shape(&g, "y"), shape, "{mode}");
    }
    // SAME_LOWER with an even kernel: the extra pad before.
    let m = window_model(
        "MaxPool",
        &["x"],
        vec![
            attr_ints("kernel_shape", &[2, 2]),
            attr_s("auto_pad", "SAME_LOWER"),
        ],
        18,
    );
    let g = import(&m).unwrap();
    let y = g.find("y").unwrap();
    let Op::MaxPool2d(p) = &g[y].op else {
        panic!("{:?}", g[y].op)
    };
    assert_eq!(p.pads, [1, 1, 0, 0]);
    // Pools: MaxPool with dilations, AveragePool both ways, global.
    let m = window_model(
        "MaxPool",
        &["x"],
        vec![
            attr_ints("kernel_shape", &[2, 2]),
            attr_ints("dilations", &[2, 1]),
            attr_ints("strides", &[1, 2]),
            attr_i("storage_order", 0),
        ],
        18,
    );
    let g = import(&m).unwrap();
    assert_eq!(out_shape(&g, "y"), "[n, 2, 3, 2]");
    for include in [0, 1] {
        let m = window_model(
            "AveragePool",
            &["x"],
            vec![
                attr_ints("kernel_shape", &[3, 3]),
                attr_ints("pads", &[1, 1, 1, 1]),
                attr_i("count_include_pad", include),
            ],
            17,
        );
        let g = import(&m).unwrap();
        let y = g.find("y").unwrap();
        assert!(
            matches!(&g[y].op, Op::AvgPool2d { count_include_pad, .. } if *count_include_pad == (include == 1)),
            "{:?}",
            g[y].op
        );
        let out = eval(&g, &[("x", &x)]);
        // The corner: 4 taps inside the input.
        let xs = x.to_f32_vec();
        let corner = (xs[0] + xs[1] + xs[5] + xs[6]) / if include == 1 { 9.0 } else { 4.0 };
        assert!((out[0].1.to_f32_vec()[0] - corner).abs() < 1e-5);
    }
    // ceil_mode where it changes nothing is accepted.
    let m = window_model(
        "MaxPool",
        &["x"],
        vec![
            attr_ints("kernel_shape", &[3, 3]),
            attr_ints("strides", &[2, 2]),
            attr_i("ceil_mode", 1),
        ],
        18,
    );
    assert_eq!(out_shape(&import(&m).unwrap(), "y"), "[n, 2, 2, 2]");
    let m = window_model("GlobalAveragePool", &["x"], vec![], 17);
    let g = import(&m).unwrap();
    assert_eq!(out_shape(&g, "y"), "[n, 2, 1, 1]");
    let out = eval(&g, &[("x", &x)]);
    let xs = x.to_f32_vec();
    let mean0 = xs[..25].iter().sum::<f32>() / 25.0;
    assert!((out[0].1.to_f32_vec()[0] - mean0).abs() < 1e-5);
}

#[test]
fn bad_window_attributes_are_errors_naming_the_node() {
    let node_err = |op: &str, inputs: &[&str], attrs: Vec<AttributeProto>| {
        let e = import(&window_model(op, inputs, attrs, 18)).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(&format!("({op})")) && text.contains("opset 18"),
            "{text}"
        );
        (e, text)
    };
    let k3 = || attr_ints("kernel_shape", &[3, 3]);
    for (op, attrs, want) in [
        ("Conv", vec![attr_ints("strides", &[0, 1])], "strides"),
        ("Conv", vec![attr_ints("strides", &[1, 1, 1])], "strides"),
        ("Conv", vec![attr_ints("pads", &[-1, 0, 0, 0])], "pads"),
        (
            "Conv",
            vec![attr_ints("pads", &[0, 0, 0, 1 << 40])],
            "a pad of 1099511627776 along W",
        ),
        (
            "MaxPool",
            vec![k3(), attr_ints("pads", &[9, 0, 0, 0])],
            "exceeds both",
        ),
        ("Conv", vec![attr_ints("dilations", &[0, 1])], "dilations"),
        ("Conv", vec![attr_i("group", 0)], "group"),
        ("Conv", vec![attr_i("group", 3)], "group"),
        (
            "Conv",
            vec![attr_ints("kernel_shape", &[2, 2])],
            "kernel_shape",
        ),
        ("Conv", vec![attr_s("auto_pad", "SAME")], "auto_pad"),
        (
            "Conv",
            vec![
                attr_s("auto_pad", "VALID"),
                attr_ints("pads", &[0, 0, 0, 0]),
            ],
            "exclusive",
        ),
        (
            "Conv",
            vec![attr_ints("dilations", &[3, 3])],
            "padded input",
        ),
        ("MaxPool", vec![], "kernel_shape"),
        (
            "MaxPool",
            vec![attr_ints("kernel_shape", &[0, 2])],
            "kernel_shape",
        ),
        (
            "MaxPool",
            vec![attr_ints("kernel_shape", &[6, 6])],
            "padded input",
        ),
        (
            "AveragePool",
            vec![k3(), attr_ints("pads", &[3, 0, 0, 0])],
            "padding",
        ),
    ] {
        let inputs: &[&str] = if op == "Conv" {
            &["x", "w", "b"]
        } else {
            &["x"]
        };
        let (e, text) = node_err(op, inputs, attrs);
        assert!(matches!(e, OnnxError::Node { .. }), "{text}");
        assert!(text.contains(want), "{want}: {text}");
    }
    for (attrs, want) in [
        (vec![k3(), attr_i("storage_order", 1)], "storage_order"),
        (
            vec![k3(), attr_i("ceil_mode", 1), attr_ints("strides", &[3, 3])],
            "ceil_mode",
        ),
    ] {
        let (e, text) = node_err("MaxPool", &["x"], attrs);
        assert!(matches!(e, OnnxError::Unsupported { .. }), "{text}");
        assert!(text.contains(want), "{want}: {text}");
    }
    // The Indices output.
    let m = model_bytes(
        vec![node(
            "MaxPool",
            &["x"],
            &["y", "idx"],
            vec![attr_ints("kernel_shape", &[2, 2])],
        )],
        vec![vi("x", elem::FLOAT, &["n", "2", "5", "5"])],
        vec![vi("y", elem::FLOAT, &["n", "2", "4", "4"])],
        vec![],
        18,
    );
    let e = import(&m).unwrap_err();
    assert!(e.to_string().contains("Indices"), "{e}");
    // A 1-D convolution and a symbolic spatial extent.
    let m = model_bytes(
        vec![node(
            "MaxPool",
            &["x"],
            &["y"],
            vec![attr_ints("kernel_shape", &[2])],
        )],
        vec![vi("x", elem::FLOAT, &["n", "2", "5"])],
        vec![vi("y", elem::FLOAT, &["n", "2", "4"])],
        vec![],
        18,
    );
    let e = import(&m).unwrap_err();
    assert!(e.to_string().contains("rank-3"), "{e}");
    let m = model_bytes(
        vec![node(
            "MaxPool",
            &["x"],
            &["y"],
            vec![attr_ints("kernel_shape", &[2, 2])],
        )],
        vec![vi("x", elem::FLOAT, &["n", "2", "h", "5"])],
        vec![vi("y", elem::FLOAT, &["n", "2", "?", "4"])],
        vec![],
        18,
    );
    let e = import(&m).unwrap_err();
    assert!(e.to_string().contains("symbolic spatial extent h"), "{e}");
}

//! The element-wise operator lists, defined once.
//!
//! Each macro calls back `$m! { /// doc\n name => Opcode; … }` with one
//! entry per operator: the method name and its [`Opcode`](dvm_isa::Opcode)
//! variant. [`Graph`](crate::Graph)'s builder methods and the eager
//! API's `LazyTensor` methods are both generated from them, so an
//! operator added here appears in both.

/// Calls `$m!` with every unary element-wise operator (see the module
/// docs).
#[macro_export]
macro_rules! for_each_unary_op {
    ($m:ident) => {
        $m! {
            /// `|x|`.
            abs => Abs;
            /// `-x`.
            neg => Neg;
            /// `e^x`.
            exp => Exp;
            /// Natural logarithm.
            log => Log;
            /// Square root.
            sqrt => Sqrt;
            /// `1 / sqrt(x)`.
            rsqrt => Rsqrt;
            /// `1 / x`.
            recip => Recip;
            /// Hyperbolic tangent.
            tanh => Tanh;
            /// Logistic sigmoid.
            sigmoid => Sigmoid;
            /// `max(x, 0)`.
            relu => Relu;
            /// GELU, tanh approximation.
            gelu_tanh => GeluTanh;
            /// GELU, erf form.
            gelu_erf => GeluErf;
            /// `x · sigmoid(x)`.
            silu => Silu;
            /// Round toward −∞.
            floor => Floor;
            /// Round toward +∞.
            ceil => Ceil;
            /// Round to nearest, ties to even.
            round => Round;
            /// Error function.
            erf => Erf;
            /// Sine (radians), as ONNX `Sin`.
            sin => Sin;
            /// Cosine (radians), as ONNX `Cos`.
            cos => Cos;
            /// Logical not (bool).
            not => Not;
            /// `x` is finite (result bool).
            isfinite => IsFinite;
        }
    };
}

/// Calls `$m!` with every binary element-wise operator (see the module
/// docs).
#[macro_export]
macro_rules! for_each_binary_op {
    ($m:ident) => {
        $m! {
            /// `a + b`.
            add => Add;
            /// `a − b`.
            sub => Sub;
            /// `a · b`.
            mul => Mul;
            /// `a / b` (integer division truncates; by zero gives 0).
            div => Div;
            /// Element-wise maximum (for the reduction see [`Graph::reduce_max`]).
            max => Max;
            /// Element-wise minimum (for the reduction see [`Graph::reduce_min`]).
            min => Min;
            /// `a ^ b`.
            pow => Pow;
            /// Logical and (bool).
            and => And;
            /// Logical or (bool).
            or => Or;
            /// `a == b` (bool).
            eq => Eq;
            /// `a != b` (bool).
            ne => Ne;
            /// `a < b` (bool).
            lt => Lt;
            /// `a <= b` (bool).
            le => Le;
            /// `a > b` (bool).
            gt => Gt;
            /// `a >= b` (bool).
            ge => Ge;
        }
    };
}

/// Calls `$m!` with every scalar element-wise operator (see the module
/// docs).
#[macro_export]
macro_rules! for_each_scalar_op {
    ($m:ident) => {
        $m! {
            /// `x + value`.
            adds => AddS;
            /// `x − value`.
            subs => SubS;
            /// `value − x`.
            rsubs => RSubS;
            /// `x · value`.
            muls => MulS;
            /// `x / value`.
            divs => DivS;
            /// `value / x`.
            rdivs => RDivS;
            /// `max(x, value)`.
            maxs => MaxS;
            /// `min(x, value)`.
            mins => MinS;
            /// `x ^ value`.
            pows => PowS;
            /// `x == value` (bool).
            eqs => EqS;
            /// `x != value` (bool).
            nes => NeS;
            /// `x < value` (bool).
            lts => LtS;
            /// `x <= value` (bool).
            les => LeS;
            /// `x > value` (bool).
            gts => GtS;
            /// `x >= value` (bool).
            ges => GeS;
        }
    };
}

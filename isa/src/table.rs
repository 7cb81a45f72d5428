//! The generator behind the instruction table.
//!
//! `define_isa!` takes the one table in `instr.rs` and generates the opcode
//! enum, mnemonics, pipes, operand layouts, the encoder, the checked decoder,
//! the dtype and UB/GM access rules the verifier applies, and the operand
//! text used by the assembler and disassembler. Adding an opcode means adding
//! one row to that table.

/// Number of words a layout of fields with the given bit widths occupies,
/// head included (fields start at bit 32 of the head, each aligned to its width).
pub const fn layout_words(widths: &[u32]) -> u8 {
    let mut bit = crate::word::OPERAND_BIT0;
    let mut i = 0;
    while i < widths.len() {
        let w = widths[i];
        bit = bit.next_multiple_of(w) + w;
        i += 1;
    }
    bit.div_ceil(64) as u8
}

macro_rules! define_isa {
    ($(
        $(#[doc = $doc:literal])*
        $code:literal $name:ident $mnem:literal $pipe:ident
        { $($field:ident : $fty:ty),* $(,)? }
        dtypes [ $($dfield:ident in $dset:ident),* $(,)? ]
        ub [ $($acc:ident ( $addr:expr, $elems:expr, $adt:expr )),* $(,)? ]
        gm [ $($gkind:ident ( $gpat:expr ))? ]
        ;
    )*) => {
        /// Every opcode of the instruction set.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Opcode {
            $( $(#[doc = $doc])* $name = $code, )*
        }

        impl Opcode {
            /// All opcodes, in table order.
            pub const ALL: &'static [Opcode] = &[ $(Opcode::$name),* ];

            /// Decodes an opcode byte.
            #[inline]
            pub const fn from_u8(v: u8) -> Option<Opcode> {
                match v {
                    $( $code => Some(Opcode::$name), )*
                    _ => None,
                }
            }

            /// The assembler mnemonic.
            pub const fn mnemonic(self) -> &'static str {
                match self { $( Opcode::$name => $mnem, )* }
            }

            /// Looks an opcode up by mnemonic.
            pub fn from_mnemonic(s: &str) -> Option<Opcode> {
                match s {
                    $( $mnem => Some(Opcode::$name), )*
                    _ => None,
                }
            }

            /// The pipe the instruction issues on.
            #[inline]
            pub const fn pipe(self) -> $crate::word::Pipe {
                match self { $( Opcode::$name => $crate::word::Pipe::$pipe, )* }
            }

            /// Encoded length in words, head included.
            #[inline]
            pub const fn len_words(self) -> u8 {
                // Each arm is a constant, evaluated at compile time.
                match self {
                    $( Opcode::$name => {
                        const WORDS: u8 = $crate::table::layout_words(
                            &[ $(<$fty as $crate::operand::Operand>::BITS),* ]);
                        WORDS
                    } )*
                }
            }

            /// Operand field names, in encoding order.
            pub const fn fields(self) -> &'static [&'static str] {
                match self { $( Opcode::$name => &[ $(stringify!($field)),* ], )* }
            }

            /// The table row's description: what the instruction computes, in
            /// one sentence (the row's doc comment, lines joined).
            pub const fn description(self) -> &'static str {
                match self { $( Opcode::$name => concat!($($doc),*).trim_ascii(), )* }
            }

            /// The operand fields as the table declares them, in encoding order.
            pub const fn operands(self) -> &'static [$crate::instr::FieldInfo] {
                match self { $( Opcode::$name => &[ $( $crate::instr::FieldInfo {
                    name: stringify!($field),
                    ty: stringify!($fty),
                    bits: <$fty as $crate::operand::Operand>::BITS,
                } ),* ], )* }
            }

            /// The dtype rule of every dtype field: the field and the name of
            /// the [`DTypeSet`]($crate::dtype::DTypeSet) constant it must be in.
            pub const fn dtype_rule_names(self) -> &'static [(&'static str, &'static str)] {
                match self { $( Opcode::$name => &[ $( (stringify!($dfield), stringify!($dset)) ),* ], )* }
            }

            /// The UB ranges as the table writes them: `(kind, address field,
            /// element count, dtype)`, each the row's expression as text.
            pub const fn ub_rule_text(self) -> &'static [(&'static str, &'static str, &'static str, &'static str)] {
                match self { $( Opcode::$name => &[ $( (stringify!($acc), stringify!($addr),
                    stringify!($elems), stringify!($adt)) ),* ], )* }
            }

            /// The kind of global-memory access (`Load`, `Store`, `StoreAdd`),
            /// for loads and stores.
            pub const fn gm_kind_name(self) -> Option<&'static str> {
                match self { $( Opcode::$name => {
                    #[allow(unused_variables)]
                    let kind: Option<&'static str> = None;
                    $( let kind = Some(stringify!($gkind)); )?
                    kind
                } )* }
            }
        }

        /// Most UB ranges one instruction touches: the longest `ub` list of
        /// the table, the capacity of [`UbAccesses`]($crate::access::UbAccesses).
        pub const MAX_UB_ACCESSES: usize = {
            let counts: &[usize] = &[ $( {
                let fields: &[&str] = &[ $(stringify!($acc)),* ];
                fields.len()
            } ),* ];
            let mut max = 0;
            let mut i = 0;
            while i < counts.len() {
                if counts[i] > max {
                    max = counts[i];
                }
                i += 1;
            }
            max
        };

        /// A decoded instruction: opcode plus typed operands.
        #[derive(Clone, Copy, Debug, PartialEq)]
        #[allow(missing_docs)]
        pub enum Instr {
            $( $(#[doc = $doc])* $name { $($field: $fty),* }, )*
        }

        impl Instr {
            /// The opcode.
            #[inline]
            pub const fn opcode(&self) -> Opcode {
                match self { $( Instr::$name { .. } => Opcode::$name, )* }
            }

            /// Packs the instruction with the given wait flags.
            pub fn encode(&self, wait: $crate::word::WaitMask) -> $crate::word::Packer {
                #[allow(unused_imports)]
                use $crate::operand::Operand as _;
                let mut p = $crate::word::Packer::new();
                match self {
                    $( Instr::$name { $($field),* } => { $( $field.pack(&mut p); )* } )*
                }
                let op = self.opcode();
                let head = $crate::word::Head {
                    opcode: op as u8,
                    len: op.len_words(),
                    pipe: op.pipe(),
                    wait,
                };
                p.set_head(head);
                p
            }

            /// Decodes the instruction at the start of `words`.
            ///
            /// Returns the head and the instruction; the instruction occupies
            /// `head.len` words.
            ///
            /// # Errors
            /// A [`DecodeError`]($crate::error::DecodeError) for an unknown
            /// opcode, a length that disagrees with the opcode's layout or runs
            /// past `words`, a pipe other than the opcode's, set reserved bits,
            /// or an invalid field value.
            pub fn decode(
                words: &[zerocopy::little_endian::U64],
            ) -> Result<($crate::word::Head, Instr), $crate::error::DecodeError> {
                #[allow(unused_imports)]
                use $crate::operand::Operand as _;
                use $crate::error::DecodeError;
                let first = words.first().ok_or(DecodeError::Truncated)?.get();
                let head = $crate::word::Head::decode(first)?;
                let op = Opcode::from_u8(head.opcode).ok_or(DecodeError::UnknownOpcode(head.opcode))?;
                if head.len != op.len_words() {
                    return Err(DecodeError::BadLength { opcode: op, len: head.len, expected: op.len_words() });
                }
                if head.pipe != op.pipe() {
                    return Err(DecodeError::WrongPipe { opcode: op, pipe: head.pipe });
                }
                let body = words.get(..head.len as usize).ok_or(DecodeError::Truncated)?;
                let mut u = $crate::word::Unpacker::new(body);
                let instr = match op {
                    $( Opcode::$name => {
                        $( let $field = <$fty>::unpack(&mut u)?; )*
                        Instr::$name { $($field),* }
                    } )*
                };
                u.finish()?;
                Ok((head, instr))
            }

            /// Calls `f(field, dtype, allowed)` for every dtype operand with
            /// its allowed set.
            pub fn dtype_rules(&self, mut f: impl FnMut(&'static str, $crate::dtype::DType, $crate::dtype::DTypeSet)) {
                match *self {
                    $( #[allow(unused_variables)] Instr::$name { $($field),* } => {
                        $( f(stringify!($dfield), $dfield, $crate::dtype::DTypeSet::$dset); )*
                    } )*
                }
            }

            /// Calls `f` for every UB range the instruction reads or writes.
            ///
            /// # Errors
            /// Whatever `f` returns first.
            pub fn for_each_ub<E>(
                &self,
                mut f: impl FnMut($crate::access::UbAccess) -> Result<(), E>,
            ) -> Result<(), E> {
                #[allow(unused_imports)]
                use $crate::access::AccessKind::{Read as read, Write as write};
                match *self {
                    $( #[allow(unused_variables)] Instr::$name { $($field),* } => {
                        $( f($crate::access::UbAccess {
                            kind: $acc,
                            field: stringify!($addr),
                            addr: $addr,
                            elems: $elems,
                            dtype: $adt,
                        })?; )*
                    } )*
                }
                Ok(())
            }

            /// The UB ranges the instruction reads or writes, in table order:
            /// what [`Instr::for_each_ub`] visits, as a list the verifier can
            /// index (its capacity is the table's longest row, so nothing is
            /// ever dropped).
            #[inline]
            pub fn ub_accesses(&self) -> $crate::access::UbAccesses {
                #[allow(unused_imports)]
                use $crate::access::AccessKind::{Read as read, Write as write};
                match *self {
                    $( #[allow(unused_variables)] Instr::$name { $($field),* } => {
                        $crate::access::UbAccesses::from_row([ $( $crate::access::UbAccess {
                            kind: $acc,
                            field: stringify!($addr),
                            addr: $addr,
                            elems: $elems,
                            dtype: $adt,
                        } ),* ])
                    } )*
                }
            }

            /// The global-memory access of a load or store.
            pub fn gm(&self) -> Option<$crate::access::GmAccess> {
                match *self {
                    $( #[allow(unused_variables)] Instr::$name { $($field),* } => {
                        None $( .or(Some($crate::access::GmAccess {
                            kind: $crate::access::GmKind::$gkind,
                            pattern: $gpat,
                        })) )?
                    } )*
                }
            }

            /// An instruction of opcode `op` whose fields are valid values drawn
            /// from `next` (for tests generated from the table).
            pub fn sample(op: Opcode, next: &mut dyn FnMut() -> u64) -> Instr {
                #[allow(unused_imports)]
                use $crate::operand::Operand as _;
                match op {
                    $( Opcode::$name => {
                        $( let $field = <$fty>::sample(next()); )*
                        Instr::$name { $($field),* }
                    } )*
                }
            }

            /// Builds an instruction of opcode `op` from raw field values (each
            /// as its packed bits, in table order): the generic constructor
            /// for code generators. `None` when the count or a value is wrong.
            pub fn from_raw(op: Opcode, raw: &[u64]) -> Option<Instr> {
                #[allow(unused_imports)]
                use $crate::operand::Operand as _;
                #[allow(unused_mut, unused_variables)]
                let mut it = raw.iter().copied();
                let instr = match op {
                    $( Opcode::$name => {
                        $( let $field = <$fty>::from_raw(it.next()?)?; )*
                        Instr::$name { $($field),* }
                    } )*
                };
                if it.next().is_some() {
                    return None;
                }
                Some(instr)
            }

            /// The first dtype operand: the context in which scalars print.
            pub fn text_context(&self) -> Option<$crate::dtype::DType> {
                #[allow(unused_imports)]
                use $crate::operand::Operand as _;
                match self {
                    $( #[allow(unused_variables)] Instr::$name { $($field),* } => {
                        None $( .or($field.as_dtype()) )*
                    } )*
                }
            }

            /// Writes ` name=value` for every operand.
            ///
            /// # Errors
            /// Only those of the writer.
            pub fn write_operands(&self, out: &mut dyn core::fmt::Write) -> core::fmt::Result {
                #[allow(unused_imports)]
                use $crate::operand::Operand as _;
                let ctx = self.text_context();
                match self {
                    $( Instr::$name { $($field),* } => {
                        $(
                            out.write_str(concat!(" ", stringify!($field), "="))?;
                            $field.write_text(ctx, out)?;
                        )*
                    } )*
                }
                Ok(())
            }

            /// Parses operands written by [`Instr::write_operands`]: one
            /// `name=value` token per field, in encoding order.
            ///
            /// # Errors
            /// An [`OperandError`]($crate::error::OperandError) naming the first
            /// missing, misplaced or unparsable field, or a token left over.
            pub fn parse_operands<'t>(
                op: Opcode,
                tokens: &mut dyn Iterator<Item = &'t str>,
            ) -> Result<Instr, $crate::error::OperandError> {
                #[allow(unused_imports)]
                use $crate::operand::Operand as _;
                use $crate::error::OperandError;
                // Dtype fields parse first so that scalars can use them as context.
                let mut ctx: Option<$crate::dtype::DType> = None;
                let mut field = |name: &'static str| -> Result<&'t str, OperandError> {
                    let tok = tokens.next().ok_or(OperandError::Missing(name))?;
                    let (key, value) = tok.split_once('=').ok_or(OperandError::Expected(name))?;
                    if key != name {
                        return Err(OperandError::Expected(name));
                    }
                    Ok(value)
                };
                let instr = match op {
                    $( Opcode::$name => {
                        $(
                            let text = field(stringify!($field))?;
                            let $field = <$fty>::parse_text(text, ctx)
                                .ok_or(OperandError::BadValue(stringify!($field)))?;
                            ctx = ctx.or($field.as_dtype());
                        )*
                        Instr::$name { $($field),* }
                    } )*
                };
                let _ = ctx;
                if tokens.next().is_some() {
                    return Err(OperandError::Extra);
                }
                Ok(instr)
            }
        }
    };
}

pub(crate) use define_isa;

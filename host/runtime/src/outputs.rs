//! The outputs of a run: tensors by name, in the graph's output order.

use dvm_tensor::Tensor;

/// The outputs of a run, in the graph's output order, each with its name.
///
/// Fetch one by name with [`Outputs::get`] or move it out with
/// [`Outputs::take`]; index by position (`outputs[0]`, a [`Tensor`]);
/// iterate over `(name, tensor)` pairs in graph order with
/// [`Outputs::iter`] or by value with `into_iter()`.
///
/// ```
/// use dvm_runtime::Outputs;
/// use dvm_tensor::Tensor;
///
/// let y = Tensor::from_f32(&[2], &[1.0, 2.0])?;
/// let z = Tensor::from_f32(&[1], &[3.0])?;
/// let mut out = Outputs::from(vec![("y".to_string(), y), ("z".to_string(), z)]);
/// assert_eq!(out.get("y").map(|t| t.shape()), Some(&[2u64][..]));
/// assert_eq!(out[1].shape(), &[1]);
/// assert_eq!(out.names().collect::<Vec<_>>(), ["y", "z"]);
/// let z = out.take("z").expect("the graph has an output `z`");
/// assert_eq!(z.as_slice::<f32>()?, &[3.0]);
/// assert!(out.get("z").is_none());
/// # Ok::<(), dvm_tensor::TensorError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outputs {
    entries: Vec<(String, Tensor)>,
}

impl Outputs {
    /// The output called `name`, if the run has one.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// The output called `name`, mutable.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Tensor> {
        self.entries
            .iter_mut()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
    }

    /// Moves the output called `name` out; the outputs after it move one
    /// position forward.
    pub fn take(&mut self, name: &str) -> Option<Tensor> {
        let i = self.entries.iter().position(|(n, _)| n == name)?;
        Some(self.entries.remove(i).1)
    }

    /// Number of outputs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no outputs.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The output names, in graph order.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.entries.iter().map(|(n, _)| n.as_str())
    }

    /// `(name, tensor)` pairs in graph order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Tensor)> + '_ {
        self.entries.iter().map(|(n, t)| (n.as_str(), t))
    }

    /// `(name, tensor)` pairs in graph order, the tensors mutable (to run
    /// into them again with [`Runtime::run_into`](crate::Runtime::run_into)).
    pub fn iter_mut(&mut self) -> impl ExactSizeIterator<Item = (&str, &mut Tensor)> + '_ {
        self.entries.iter_mut().map(|(n, t)| (n.as_str(), t))
    }

    /// The `(name, tensor)` pairs as a slice, in graph order.
    pub fn as_slice(&self) -> &[(String, Tensor)] {
        &self.entries
    }

    /// The `(name, tensor)` pairs, in graph order.
    pub fn into_vec(self) -> Vec<(String, Tensor)> {
        self.entries
    }
}

impl From<Vec<(String, Tensor)>> for Outputs {
    fn from(entries: Vec<(String, Tensor)>) -> Outputs {
        Outputs { entries }
    }
}

impl FromIterator<(String, Tensor)> for Outputs {
    fn from_iter<I: IntoIterator<Item = (String, Tensor)>>(iter: I) -> Outputs {
        Outputs {
            entries: iter.into_iter().collect(),
        }
    }
}

impl std::ops::Index<usize> for Outputs {
    type Output = Tensor;

    /// The output at `index` in graph order.
    ///
    /// # Panics
    /// When `index` is not below [`Outputs::len`].
    fn index(&self, index: usize) -> &Tensor {
        &self.entries[index].1
    }
}

impl std::ops::Index<&str> for Outputs {
    type Output = Tensor;

    /// The output called `name`.
    ///
    /// # Panics
    /// When there is no output of that name ([`Outputs::get`] does not
    /// panic).
    fn index(&self, name: &str) -> &Tensor {
        match self.get(name) {
            Some(t) => t,
            None => panic!(
                "no output `{name}` (outputs: {})",
                self.names().collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

impl IntoIterator for Outputs {
    type Item = (String, Tensor);
    type IntoIter = std::vec::IntoIter<(String, Tensor)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'a> IntoIterator for &'a Outputs {
    type Item = (&'a str, &'a Tensor);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, Tensor)>,
        fn(&'a (String, Tensor)) -> (&'a str, &'a Tensor),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(n, t)| (n.as_str(), t))
    }
}

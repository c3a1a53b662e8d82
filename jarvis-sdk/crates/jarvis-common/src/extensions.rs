//! [`Extensions`]: a small typed map that carries values from the code that
//! starts a turn to the tools that run in it (for example the delegation
//! chain of `ask_agent`), without every layer in between knowing the types.

use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Values keyed by their type; cloning is cheap (shared values).
#[derive(Clone, Default)]
pub struct Extensions {
    values: BTreeMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.values.len())
            .finish()
    }
}

impl Extensions {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `value`, replacing any earlier value of the same type.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.values.insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`, if one was stored.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.values.get(&TypeId::of::<T>()).and_then(|v| v.downcast_ref())
    }

    /// Builder form of [`Extensions::insert`].
    pub fn with<T: Any + Send + Sync>(mut self, value: T) -> Self {
        self.insert(value);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Chain(Vec<&'static str>);

    #[test]
    fn values_are_found_by_type() {
        let ext = Extensions::new().with(Chain(vec!["main"])).with(7u32);
        assert_eq!(ext.get::<Chain>(), Some(&Chain(vec!["main"])));
        assert_eq!(ext.get::<u32>(), Some(&7));
        assert_eq!(ext.get::<String>(), None);
        let copy = ext.clone().with(8u32);
        assert_eq!((ext.get::<u32>(), copy.get::<u32>()), (Some(&7), Some(&8)));
    }
}

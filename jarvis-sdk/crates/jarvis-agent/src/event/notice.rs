//! [`Notice`]: an event a layer above the loop sends to a session's screens
//! (the AGENDA changed, a Focus task moved on), carried by
//! [`AgentEvent::Notice`](super::AgentEvent::Notice) so the agent layer need
//! not know its fields.
//!
//! In JSON a notice is an object like every event: its `type` first, then
//! its fields in the order the type that made it declares them. So the
//! frame a screen reads is the one the typed value would make on its own.

use serde::de::{self, DeserializeOwned, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use std::fmt;

/// A typed notice: what a layer above the loop tells screens, with the
/// `type` it goes by. Implemented by the notices' own types
/// (`AgendaChanged` here, `FocusState` and `FocusPanel` in the initiative
/// layer).
pub trait ScreenNotice: Serialize + DeserializeOwned {
    /// The `type` of its frames (`focus_state`).
    const KIND: &'static str;
}

/// A notice for screens, as the loop's subscribers receive it: its `type`
/// and its fields, kept as the JSON the typed notice made.
#[derive(Debug, Clone)]
pub struct Notice {
    kind: String,
    fields: Vec<(String, Box<RawValue>)>,
}

impl Notice {
    /// The notice `value` of type `N`. A value that does not serialise to a
    /// JSON object (a type that is not a struct) makes a notice without
    /// fields, and says so in the log.
    pub fn of<N: ScreenNotice>(value: &N) -> Self {
        // Read straight from the text, so each value keeps its JSON as
        // written (nested objects in their fields' order).
        let fields = serde_json::to_string(value)
            .and_then(|text| serde_json::from_str::<Fields<Box<RawValue>>>(&text))
            .map(|fields| fields.0)
            .unwrap_or_else(|error| {
                tracing::error!(kind = N::KIND, %error, "a screen notice is not a JSON object; sent without fields");
                Vec::new()
            });
        Self {
            kind: N::KIND.to_owned(),
            fields,
        }
    }

    /// Its `type`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The notice as an `N`, when it is of `N`'s type and its fields make one.
    pub fn decode<N: ScreenNotice>(&self) -> Option<N> {
        if self.kind != N::KIND {
            return None;
        }
        let text = serde_json::to_string(self).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Equal when their `type`s are and their fields hold equal JSON values
/// (an object's members compared whatever their order).
impl PartialEq for Notice {
    fn eq(&self, other: &Self) -> bool {
        let value = |raw: &RawValue| serde_json::from_str::<serde_json::Value>(raw.get()).ok();
        self.kind == other.kind
            && self.fields.len() == other.fields.len()
            && self
                .fields
                .iter()
                .zip(&other.fields)
                .all(|((k1, v1), (k2, v2))| k1 == k2 && value(v1) == value(v2))
    }
}

impl Serialize for Notice {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.fields.len() + 1))?;
        map.serialize_entry("type", &self.kind)?;
        for (key, value) in &self.fields {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// Read through any deserializer (an event's `type` is read first, from a
/// buffered copy, where a value's JSON text is no longer at hand): each
/// value is read as a JSON value and written back, so a nested object's
/// members may come out in another order than they were sent in.
impl<'de> Deserialize<'de> for Notice {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Fields(members) = Fields::<serde_json::Value>::deserialize(deserializer)?;
        let mut kind = None;
        let mut fields = Vec::with_capacity(members.len());
        for (key, value) in members {
            if key == "type" {
                match value {
                    serde_json::Value::String(text) => kind = Some(text),
                    _ => return Err(de::Error::custom("a notice's `type` is not a string")),
                }
            } else {
                let raw = serde_json::value::to_raw_value(&value).map_err(de::Error::custom)?;
                fields.push((key, raw));
            }
        }
        let kind = kind.ok_or_else(|| de::Error::missing_field("type"))?;
        Ok(Self { kind, fields })
    }
}

/// A JSON object's members in their order.
struct Fields<V>(Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Fields<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Members<V> {
            type Value = Fields<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<V>, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(4).min(64));
                while let Some((key, value)) = map.next_entry::<String, V>()? {
                    fields.push((key, value));
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(Members(std::marker::PhantomData))
    }
}

//! RocketMQ's status enums, each written in the engine as one list of
//! variants with their ordinal and RocketMQ name:
//! [`rocketmq_enum!`](crate::rocketmq_enum) makes the Rust enum, the list of
//! every member (`ALL`, counted by the compiler) and the names. The Python
//! package writes them a second time (`python/rocketstore/enums.py`, plain
//! `enum.Enum` classes); a test compares the two through `_engine_enums`
//! (same names and ordinals), and the binding maps members by name, never
//! by position.

/// Defines a `#[repr(u8)]` enum whose variants carry RocketMQ's ordinal and
/// name, with `ALL` (every variant, in order), `name()` and `from_name()`.
#[macro_export]
macro_rules! rocketmq_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal => $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant = $value, )+
        }

        impl $name {
            /// Every member, in ordinal order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// RocketMQ's name of the member.
            pub fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }

            /// The member with RocketMQ's name `name`.
            pub fn from_name(name: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|m| m.name() == name)
            }
        }

        impl From<$name> for u8 {
            fn from(m: $name) -> u8 {
                m as u8
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use crate::log::commitlog::PutStatus;
    use crate::queue::reader::GetStatus;

    #[test]
    fn ordinals_run_from_zero_in_order() {
        for (i, m) in PutStatus::ALL.iter().enumerate() {
            assert_eq!(*m as usize, i);
            assert_eq!(PutStatus::from_name(m.name()), Some(*m));
        }
        for (i, m) in GetStatus::ALL.iter().enumerate() {
            assert_eq!(*m as usize, i);
            assert_eq!(GetStatus::from_name(m.name()), Some(*m));
        }
        assert_eq!(PutStatus::ALL.len(), 10);
        assert_eq!(GetStatus::ALL.len(), 9);
    }
}

//! The macros behind the ioctl table in [`numbers`](crate::numbers). Each
//! ioctl is one line there, and its constant, its entry in `ALL`, its name,
//! family and pointer shape and its decoding are all generated from that
//! line, so they cannot drift apart (kvm-ioctls' one line per ioctl).
//!
//! A line is `NAME = number [, Family] [, stores] => shape;`:
//!
//! - `Family`: `Ev4`, `Ev5` or `Ev6` for a family's own ioctl; absent for
//!   one that every family answers.
//! - `stores`: the argument is a pointer the device stores through
//!   (`numbers::stores_through_pointer`).
//! - `shape`: the [`Request`](crate::Request) it decodes to, written as the
//!   variant with the type read from the argument bytes:
//!   - `Variant`: nothing read;
//!   - `Variant(T)` or `Variant { field: T }`: a `T`;
//!   - `Variant(convert T)`: a `T`, passed through the function
//!     `request::convert` (`user`, `kernel`);
//!   - `Counters(Op(T))` or `Counters(Op { field: T })`: a per-counter
//!     operation of the line's family on the `u64` word, `T` unpacked from
//!     the word the way that family packs it (`request::CounterWord`); a
//!     `{ field: T }` is the word as it is.

macro_rules! ioctls {
    ($(
        $name:ident = $number:expr $(, $flag:ident)*
            => $variant:ident $(($($tuple:tt)*))? $({$($fields:tt)*})?;
    )*) => {
        $(pub const $name: u32 = $number;)*

        /// Every ioctl with its C name, for the header check and logs.
        pub const ALL: &[(&str, u32)] = &[$((stringify!($name), $name)),*];

        /// The C name of `cmd`, for logs.
        pub fn name(cmd: u32) -> Option<&'static str> {
            match cmd {
                $($name => Some(stringify!($name)),)*
                _ => None,
            }
        }

        /// True for the ioctls whose argument is a pointer to caller memory
        /// the device fills (`*GETCNT`, `*READCNTRS`, `PCNTGETIPLHIS`): the
        /// `_IOW` word is the address, the data goes wherever it points.
        /// Transports that can ask the kernel to copy (CUSE) need to know
        /// this shape, not what it means.
        pub fn stores_through_pointer(cmd: u32) -> bool {
            match cmd {
                $($name => ioctl_stores!($($flag)*),)*
                _ => false,
            }
        }

        /// The family an ioctl number belongs to (`None`: family-independent
        /// or unknown).
        pub fn family_of(cmd: u32) -> Option<$crate::Family> {
            match cmd {
                $($name => ioctl_family!($($flag)*),)*
                _ => None,
            }
        }

        /// Decodes `cmd` with its input bytes (`_IOC_SIZE(cmd)` bytes for
        /// `_IOW`).
        pub fn decode(
            cmd: u32,
            data: &[u8],
        ) -> Result<$crate::Request, $crate::DecodeError> {
            match cmd {
                $($name => ioctl_decode!(
                    $name, data, [$($flag)*]
                    $variant $(($($tuple)*))? $({$($fields)*})?
                ),)*
                _ => Err($crate::DecodeError::Unknown { cmd }),
            }
        }
    };
}

/// The `Family` flag of a line, if any.
macro_rules! ioctl_family {
    () => {
        None
    };
    (stores) => {
        None
    };
    ($family:ident) => {
        Some($crate::Family::$family)
    };
    ($family:ident stores) => {
        Some($crate::Family::$family)
    };
}

/// The `stores` flag of a line. Anything else after the family is refused
/// here, so a misspelt flag does not compile.
macro_rules! ioctl_stores {
    (stores) => {
        true
    };
    ($family:ident stores) => {
        true
    };
    () => {
        false
    };
    ($family:ident) => {
        false
    };
}

/// The decode of one line's shape (see the module documentation). The
/// `Counters` rules come first: `Op(T)` would also parse as a type.
macro_rules! ioctl_decode {
    ($name:ident, $data:ident, [$($flag:ident)*] Counters($op:ident($t:ty))) => {{
        const FAMILY: $crate::Family = ioctl_counter_family!($($flag)*);
        $crate::request::arg::<u64>(stringify!($name), $data).map(|word| {
            let unpacked = <$t as $crate::request::CounterWord>::from_word(FAMILY, word);
            $crate::Request::Counters(FAMILY, $crate::CounterOp::$op(unpacked))
        })
    }};
    ($name:ident, $data:ident, [$($flag:ident)*]
        Counters($op:ident { $field:ident: $t:ty })) => {{
        const FAMILY: $crate::Family = ioctl_counter_family!($($flag)*);
        $crate::request::arg::<$t>(stringify!($name), $data)
            .map(|$field| $crate::Request::Counters(FAMILY, $crate::CounterOp::$op { $field }))
    }};
    ($name:ident, $data:ident, $flags:tt $variant:ident) => {
        Ok($crate::Request::$variant)
    };
    ($name:ident, $data:ident, $flags:tt $variant:ident($convert:ident $t:ty)) => {
        $crate::request::arg::<$t>(stringify!($name), $data)
            .map(|argument| $crate::Request::$variant($crate::request::$convert(argument)))
    };
    ($name:ident, $data:ident, $flags:tt $variant:ident($t:ty)) => {
        $crate::request::arg::<$t>(stringify!($name), $data).map($crate::Request::$variant)
    };
    ($name:ident, $data:ident, $flags:tt $variant:ident { $field:ident: $t:ty }) => {
        $crate::request::arg::<$t>(stringify!($name), $data)
            .map(|$field| $crate::Request::$variant { $field })
    };
}

/// The family of a `Counters` line, which it cannot do without.
macro_rules! ioctl_counter_family {
    ($(stores)?) => {
        compile_error!("a Counters line needs its family")
    };
    ($family:ident $(stores)?) => {
        $crate::Family::$family
    };
}

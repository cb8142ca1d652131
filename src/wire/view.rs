//! The zero-copy view pattern shared by every header (smoltcp style): a `Xxx<T: AsRef<[u8]>>`
//! wrapping a buffer that starts at the header, `new_unchecked` for emit paths that size the
//! buffer themselves and `new_checked` for receive paths, with big-endian field accessors.

/// Declares a header view type with its fixed length.
macro_rules! header_view {
    ($(#[$m:meta])* $name:ident, $len:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Header length in bytes.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length; accessors then panic on a short
            /// buffer, so use this only on buffers sized from [`Self::LEN`].
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wraps a buffer after checking it holds the whole header.
            pub fn new_checked(buffer: T) -> Result<Self, crate::wire::WireError> {
                let have = buffer.as_ref().len();
                if have < $len {
                    return Err(crate::wire::WireError::Truncated { need: $len, have });
                }
                Ok($name { buffer })
            }

            pub fn into_inner(self) -> T {
                self.buffer
            }

            #[inline]
            #[allow(dead_code)]
            fn be16(&self, at: usize) -> u16 {
                let b = self.buffer.as_ref();
                u16::from_be_bytes([b[at], b[at + 1]])
            }
            #[inline]
            #[allow(dead_code)]
            fn be24(&self, at: usize) -> u32 {
                let b = self.buffer.as_ref();
                u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
            }
            #[inline]
            #[allow(dead_code)]
            fn be32(&self, at: usize) -> u32 {
                let b = self.buffer.as_ref();
                u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
            }
            #[inline]
            #[allow(dead_code)]
            fn be64(&self, at: usize) -> u64 {
                let b = self.buffer.as_ref();
                let mut v = [0u8; 8];
                v.copy_from_slice(&b[at..at + 8]);
                u64::from_be_bytes(v)
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            #[inline]
            #[allow(dead_code)]
            fn set_be16(&mut self, at: usize, v: u16) {
                self.buffer.as_mut()[at..at + 2].copy_from_slice(&v.to_be_bytes());
            }
            #[inline]
            #[allow(dead_code)]
            fn set_be24(&mut self, at: usize, v: u32) {
                self.buffer.as_mut()[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
            }
            #[inline]
            #[allow(dead_code)]
            fn set_be32(&mut self, at: usize, v: u32) {
                self.buffer.as_mut()[at..at + 4].copy_from_slice(&v.to_be_bytes());
            }
            #[inline]
            #[allow(dead_code)]
            fn set_be64(&mut self, at: usize, v: u64) {
                self.buffer.as_mut()[at..at + 8].copy_from_slice(&v.to_be_bytes());
            }
        }
    };
}

pub(crate) use header_view;

//! Why a ring-buffer record could not be decoded: the one error of [`super::decode`] and the
//! decoders it calls.

/// A record that could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than the header, or than the struct its kind names.
    #[error("record of {got} bytes is too short (need {need})")]
    Short { got: usize, need: usize },
    /// A kind this build does not know (a newer eBPF object, or corruption).
    #[error("unknown record kind {0}")]
    UnknownKind(u32),
    /// A record naming a hook backend this build does not know.
    #[error("record from unknown hook backend {0}")]
    UnknownHook(u32),
    /// The header's length field disagrees with the record.
    #[error("record says {said} bytes but is {got}")]
    Length { said: u32, got: usize },
}

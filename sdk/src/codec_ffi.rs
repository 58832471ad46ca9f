//! The audio-codec contract across a plugin boundary. A plugin implements the plain Rust
//! [`AudioCodec`]; its registration wraps it in [`PluginCodec`] (FFI-safe, panics caught), and
//! the host wraps what it loads in [`HostCodec`], an `AudioCodec` again. Codes cross as one
//! row-major `[frame][codebook]` slice, audio as [`Audio`] (which derives `StableAbi`).

// abi_stable's sabi_trait expands to impls rustc now lints as non-local.
#![allow(non_local_definitions)]

use abi_stable::{
    sabi_trait,
    sabi_trait::TD_Opaque,
    std_types::{RBox, RResult, RSlice, RVec},
};

use crate::audio::{Audio, AudioCodec};
use crate::backend::{ffi_result, lift};
use crate::{Error, FfiError, Result};

/// The FFI form of [`AudioCodec`].
#[sabi_trait]
pub trait CodecModel: Send + Sync {
    fn sample_rate(&self) -> u32;
    fn frame_rate(&self) -> f64;
    fn num_codebooks(&self) -> u64;
    /// Codes of `audio`, row-major `[frame][codebook]`.
    fn encode(&self, audio: &Audio) -> RResult<RVec<u32>, FfiError>;
    /// Audio of `codes`, row-major `[frame][codebook]`.
    fn decode(&self, codes: RSlice<'_, u32>) -> RResult<Audio, FfiError>;
}

pub type CodecModelBox = CodecModel_TO<'static, RBox<()>>;

/// Plugin side: exposes a Rust codec through the FFI trait.
pub struct PluginCodec<M>(pub M);

impl<M: AudioCodec + 'static> PluginCodec<M> {
    pub fn boxed(model: M) -> CodecModelBox {
        CodecModel_TO::from_value(PluginCodec(model), TD_Opaque)
    }
}

impl<M: AudioCodec> CodecModel for PluginCodec<M> {
    fn sample_rate(&self) -> u32 {
        crate::catch_panic("sample_rate", || Ok(self.0.sample_rate())).unwrap_or(0)
    }

    fn frame_rate(&self) -> f64 {
        crate::catch_panic("frame_rate", || Ok(self.0.frame_rate())).unwrap_or(0.0)
    }

    fn num_codebooks(&self) -> u64 {
        crate::catch_panic("num_codebooks", || Ok(self.0.num_codebooks() as u64)).unwrap_or(0)
    }

    fn encode(&self, audio: &Audio) -> RResult<RVec<u32>, FfiError> {
        ffi_result("codec encode", || Ok(self.0.encode(audio)?.into_iter().flatten().collect()))
    }

    fn decode(&self, codes: RSlice<'_, u32>) -> RResult<Audio, FfiError> {
        ffi_result("codec decode", || {
            let width = self.0.num_codebooks().max(1);
            if !codes.len().is_multiple_of(width) {
                return Err(Error::Shape(format!("{} codes are not whole frames of {width} codebooks", codes.len())));
            }
            let frames: Vec<Vec<u32>> = codes.chunks(width).map(<[u32]>::to_vec).collect();
            self.0.decode(&frames)
        })
    }
}

/// Host side: a loaded codec as an [`AudioCodec`].
pub struct HostCodec(pub CodecModelBox);

impl AudioCodec for HostCodec {
    fn sample_rate(&self) -> u32 {
        self.0.sample_rate()
    }

    fn frame_rate(&self) -> f64 {
        self.0.frame_rate()
    }

    fn num_codebooks(&self) -> usize {
        self.0.num_codebooks() as usize
    }

    fn encode(&self, audio: &Audio) -> Result<Vec<Vec<u32>>> {
        let flat = lift(self.0.encode(audio))?;
        let width = self.num_codebooks().max(1);
        Ok(flat.chunks(width).map(<[u32]>::to_vec).collect())
    }

    fn decode(&self, codes: &[Vec<u32>]) -> Result<Audio> {
        let flat: Vec<u32> = codes.iter().flatten().copied().collect();
        lift(self.0.decode(flat.as_slice().into()))
    }
}

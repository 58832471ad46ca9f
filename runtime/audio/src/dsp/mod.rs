//! Signal processing on the host: short-time Fourier transforms and mel spectrograms, parameterised
//! so each audio model states the exact front end its reference uses (see [`MelConfig`]).

pub mod mel;
pub mod stft;

pub use mel::{mel_filterbank, LogCompression, Mel, MelConfig, MelNorm, MelScale, MelSpectrogram};
pub use stft::{hann_window, Padding, Stft};

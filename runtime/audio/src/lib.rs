//! infer-audio: the audio runtime. Audio files in and out ([`audio_io`]: WAV, FLAC, MP3, Ogg
//! Vorbis/Opus, resampling to a model's rate) and the DSP the speech models share ([`dsp`]:
//! STFT, mel spectrograms).

pub mod audio_io;
pub mod dsp;

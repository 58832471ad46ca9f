//! The Qwen3-TTS 12 Hz codec ("Qwen3-TTS-Tokenizer-12Hz") as an `AudioCodec`.

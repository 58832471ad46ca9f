//! A host application that transcribes through infer's registry, as README.md shows: the plugins
//! the CLI uses (built in, plus libraries named in plugins.toml), a recognizer chosen by the
//! checkpoint's `model_type`, and a streaming session fed 80 ms of audio at a time, printing text
//! as the model decides it.
//!
//! `cargo run --release -p infer-example-transcribe -- MODEL_DIR AUDIO_FILE`

use std::io::Write;

// The built-in plugins this host links: referencing a crate keeps its registrations.
use infer_backend_candle as _;
use infer_voxtral_realtime as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(model_dir), Some(file)) = (args.next(), args.next()) else {
        return Err("usage: transcribe-host MODEL_DIR AUDIO_FILE".into());
    };
    // README: begin
    let registry = infer_core::Registry::discover(None)?; // plugins.toml, built-ins
    let recognizer = registry.load_recognizer(model_dir.as_ref(), &infer_core::LoadConfig::default())?;
    // Any format, rate and channel count -> mono at the recognizer's rate (16 kHz).
    let audio = infer_core::audio_io::load_for_model(&file, recognizer.sample_rate())?;
    let options = infer_core::audio::RecognitionOptions::default(); // delay_ms: RNone = the checkpoint's
    let mut session = recognizer.start_session(&options)?;
    let chunk = recognizer.sample_rate() as usize * 80 / 1000; // 80 ms, as a microphone delivers it
    for samples in audio.samples.chunks(chunk) {
        let delta = session.push_audio(samples)?; // newly decided text and token ids
        print!("{}", delta.text);
        std::io::stdout().flush()?;
    }
    println!("{}", session.finish()?.text); // the end of the audio: the rest of the text
    eprintln!("{:?}", session.metrics()); // real-time factor, per-chunk latency, tokens

    // README: end
    Ok(())
}

//! The default microphone for `infer transcribe --mic`, through cpal. cpal links ALSA on Linux,
//! whose headers a fresh machine lacks, so it is behind the `mic` feature: the default build
//! stays buildable everywhere and says which feature `--mic` needs.

#[cfg(not(feature = "mic"))]
mod imp {
    use anyhow::{bail, Result};

    const NOT_BUILT: &str = "--mic needs the `mic` feature: build with `cargo build --release -p infer-cli --features mic` (on Linux it links ALSA: install libasound2-dev and pkg-config first)";

    pub fn check_available() -> Result<()> {
        bail!(NOT_BUILT)
    }

    pub fn capture(_rate: u32, _on_audio: &mut dyn FnMut(&[f32]) -> Result<()>) -> Result<()> {
        bail!(NOT_BUILT)
    }
}

#[cfg(feature = "mic")]
mod imp {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc::{self, RecvTimeoutError};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use anyhow::{anyhow, bail, Result};
    use cpal::traits::{DeviceTrait, HostTrait, StreamTrait};
    use cpal::{FromSample, Sample, SampleFormat, SizedSample, StreamConfig};
    use infer_core::audio_io::{downmix, StreamResampler};

    /// Set by Ctrl-C: capture ends, and the session finishes with the audio it has.
    static STOP: AtomicBool = AtomicBool::new(false);

    extern "C" fn on_interrupt(_: libc::c_int) {
        STOP.store(true, Ordering::SeqCst);
    }

    /// The default input device and its default configuration, or one line saying why not.
    fn open() -> Result<(cpal::Device, String, cpal::SupportedStreamConfig)> {
        let host = cpal::default_host();
        let device = host.default_input_device().ok_or_else(|| {
            anyhow!("no microphone: the {} audio host has no input device (transcribe a file instead)", host.id())
        })?;
        let name = device.description().map(|d| d.to_string()).unwrap_or_else(|_| "the default input".into());
        let config = device
            .default_input_config()
            .map_err(|e| anyhow!("no usable microphone: {name} (the default input device) cannot record: {e}"))?;
        Ok((device, name, config))
    }

    pub fn check_available() -> Result<()> {
        open().map(|_| ())
    }

    /// Records until Ctrl-C, handing `on_audio` mono samples at `rate` as they arrive.
    pub fn capture(rate: u32, on_audio: &mut dyn FnMut(&[f32]) -> Result<()>) -> Result<()> {
        let (device, name, config) = open()?;
        let (channels, from) = (config.channels() as usize, config.sample_rate());
        let (tx, rx) = mpsc::channel::<Vec<f32>>();
        let failure = Arc::new(Mutex::new(None::<String>));
        let stream_config: StreamConfig = config.clone().into();
        let stream = match config.sample_format() {
            SampleFormat::F32 => build::<f32>(&device, stream_config, channels, tx, failure.clone()),
            SampleFormat::I16 => build::<i16>(&device, stream_config, channels, tx, failure.clone()),
            SampleFormat::I32 => build::<i32>(&device, stream_config, channels, tx, failure.clone()),
            SampleFormat::U16 => build::<u16>(&device, stream_config, channels, tx, failure.clone()),
            SampleFormat::U8 => build::<u8>(&device, stream_config, channels, tx, failure.clone()),
            other => bail!("microphone {name}: sample format {other} is not supported"),
        }
        .map_err(|e| anyhow!("microphone {name}: cannot open an input stream: {e}"))?;
        stream.play().map_err(|e| anyhow!("microphone {name}: cannot start recording: {e}"))?;
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(libc::SIGINT, on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t);
        }
        eprintln!("listening to {name} ({from} Hz, {channels} channel(s)); Ctrl-C stops");
        let mut resampler = StreamResampler::new(from, rate)?;
        let result = (|| {
            while !STOP.load(Ordering::SeqCst) {
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(chunk) => {
                        let samples = resampler.push(&chunk)?;
                        if !samples.is_empty() {
                            on_audio(&samples)?;
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => bail!("microphone {name} stopped delivering audio"),
                }
                if let Some(e) = failure.lock().map_err(|_| anyhow!("microphone state poisoned"))?.take() {
                    bail!("microphone {name}: {e}");
                }
            }
            Ok(())
        })();
        drop(stream);
        // SAFETY: restoring the default disposition; a second Ctrl-C now ends the process.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
        }
        result?;
        let tail = resampler.finish()?;
        if !tail.is_empty() {
            on_audio(&tail)?;
        }
        Ok(())
    }

    fn build<T>(
        device: &cpal::Device,
        config: StreamConfig,
        channels: usize,
        tx: mpsc::Sender<Vec<f32>>,
        failure: Arc<Mutex<Option<String>>>,
    ) -> Result<cpal::Stream, cpal::Error>
    where
        T: SizedSample,
        f32: FromSample<T>,
    {
        device.build_input_stream(
            config,
            move |data: &[T], _: &cpal::InputCallbackInfo| {
                let interleaved: Vec<f32> = data.iter().map(|s| s.to_sample::<f32>()).collect();
                // The receiver is gone only when capture has ended.
                let _ = tx.send(downmix(&interleaved, channels));
            },
            move |e| {
                if let Ok(mut f) = failure.lock() {
                    f.get_or_insert(e.to_string());
                }
            },
            None,
        )
    }
}

pub use imp::{capture, check_available};

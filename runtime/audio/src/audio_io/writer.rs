//! Writing audio: one [`AudioSink`] per format, fed mono f32 chunks as they are produced.
//! Whole clips go through the same sinks ([`write_audio`], [`encode_audio`]).

use std::fs::File;
use std::io::{BufWriter, Cursor, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::format::{to_i16, AudioFormat};
use super::resample::StreamResampler;
use infer_sdk::audio::Audio;
use infer_sdk::{Error, Result};

/// Receives mono f32 samples (at the rate the sink was created with) and encodes them.
/// [`AudioSink::finish`] must be called: it flushes the encoder and completes the file.
pub trait AudioSink: Send {
    fn write(&mut self, samples: &[f32]) -> Result<()>;
    fn finish(self: Box<Self>) -> Result<()>;
}

/// A destination that can be rewound (a file, memory) or only appended to (a pipe).
pub trait SeekWrite: Write + Seek + Send {}
impl<T: Write + Seek + Send> SeekWrite for T {}

/// Where encoded bytes go; `name` (a path, `stdout`) is used in errors.
pub(crate) struct Output {
    inner: OutputKind,
    pub name: String,
}

enum OutputKind {
    Seekable(Box<dyn SeekWrite>),
    Stream(Box<dyn Write + Send>),
}

impl Output {
    /// An error of the encoder writing here (used by the `audio-encoders` sinks).
    #[cfg_attr(not(feature = "audio-encoders"), allow(dead_code))]
    pub fn err(&self, e: impl std::fmt::Display) -> Error {
        Error::Io { path: self.name.clone().into(), source: std::io::Error::other(e.to_string()) }
    }

    pub fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.write_all(bytes).map_err(|e| Error::io(&self.name, e))
    }

    pub fn done(&mut self) -> Result<()> {
        self.flush().map_err(|e| Error::io(&self.name, e))
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.inner {
            OutputKind::Seekable(w) => w.write(buf),
            OutputKind::Stream(w) => w.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.inner {
            OutputKind::Seekable(w) => w.flush(),
            OutputKind::Stream(w) => w.flush(),
        }
    }
}

/// Opens `path` for writing audio at `sample_rate`; the format is `format` or else the file
/// extension's. See [`AudioFormat`] for what each format stores and streams.
pub fn create_writer(path: &Path, format: Option<AudioFormat>, sample_rate: u32) -> Result<Box<dyn AudioSink>> {
    let format = match format {
        Some(f) => f,
        None => AudioFormat::from_path(path)?,
    };
    check_available(format)?;
    let file = File::create(path).map_err(|e| Error::io(path, e))?;
    let out = Output { inner: OutputKind::Seekable(Box::new(BufWriter::new(file))), name: path.display().to_string() };
    make_sink(out, format, sample_rate)
}

/// Writes audio in `format` to `file`, already open (one the caller created under a name of its
/// choosing, e.g. with `create_new`); `name` goes into error messages.
pub fn file_writer(file: File, name: &str, format: AudioFormat, sample_rate: u32) -> Result<Box<dyn AudioSink>> {
    check_available(format)?;
    let out = Output { inner: OutputKind::Seekable(Box::new(BufWriter::new(file))), name: name.to_string() };
    make_sink(out, format, sample_rate)
}

/// Writes to a destination that cannot seek (stdout, a socket). WAV gets an open-ended header
/// (data size 0xFFFFFFFF, which players read as "until the end").
pub fn stream_writer(
    out: Box<dyn Write + Send>,
    name: &str,
    format: AudioFormat,
    sample_rate: u32,
) -> Result<Box<dyn AudioSink>> {
    check_available(format)?;
    make_sink(Output { inner: OutputKind::Stream(out), name: name.to_string() }, format, sample_rate)
}

/// Writes a whole clip to `path` (format from the extension unless given).
pub fn write_audio(path: &Path, audio: &Audio, format: Option<AudioFormat>) -> Result<()> {
    let mut w = create_writer(path, format, audio.sample_rate)?;
    w.write(&audio.samples)?;
    w.finish()
}

/// A whole clip encoded in memory (e.g. an HTTP response body).
pub fn encode_audio(audio: &Audio, format: AudioFormat) -> Result<Vec<u8>> {
    check_available(format)?;
    let buf = SharedBuf::default();
    let out = Output { inner: OutputKind::Seekable(Box::new(buf.clone())), name: "<memory>".into() };
    let mut w = make_sink(out, format, audio.sample_rate)?;
    w.write(&audio.samples)?;
    w.finish()?;
    let bytes = std::mem::take(buf.0.lock().expect("audio buffer lock").get_mut());
    Ok(bytes)
}

fn check_available(format: AudioFormat) -> Result<()> {
    if format.available() {
        Ok(())
    } else {
        Err(Error::unsupported(format!(
            "writing {format} needs infer-core built with the `audio-encoders` feature; wav and pcm are always available"
        )))
    }
}

fn make_sink(out: Output, format: AudioFormat, sample_rate: u32) -> Result<Box<dyn AudioSink>> {
    if sample_rate == 0 {
        return Err(Error::invalid(format!("{}: cannot write audio with a sample rate of 0", out.name)));
    }
    let stored = format.stored_rate(sample_rate);
    let sink: Box<dyn AudioSink> = match format {
        AudioFormat::Pcm => Box::new(PcmSink { out, bytes: Vec::new() }),
        AudioFormat::Wav | AudioFormat::WavF32 => wav_sink(out, format == AudioFormat::WavF32, stored)?,
        #[cfg(feature = "audio-encoders")]
        AudioFormat::Flac => Box::new(super::flac::FlacSink::new(out, stored)),
        #[cfg(feature = "audio-encoders")]
        AudioFormat::Mp3 => Box::new(super::mp3::Mp3Sink::new(out, stored)?),
        #[cfg(feature = "audio-encoders")]
        AudioFormat::Opus => Box::new(super::opus::OpusSink::new(out, stored)?),
        #[cfg(not(feature = "audio-encoders"))]
        AudioFormat::Flac | AudioFormat::Mp3 | AudioFormat::Opus => return Err(check_available(format).unwrap_err()),
    };
    if stored == sample_rate {
        Ok(sink)
    } else {
        Ok(Box::new(Resampled { inner: sink, resampler: StreamResampler::new(sample_rate, stored)? }))
    }
}

/// Converts the rate before a format that cannot store the input's.
struct Resampled {
    inner: Box<dyn AudioSink>,
    resampler: StreamResampler,
}

impl AudioSink for Resampled {
    fn write(&mut self, samples: &[f32]) -> Result<()> {
        let out = self.resampler.push(samples)?;
        self.inner.write(&out)
    }
    fn finish(self: Box<Self>) -> Result<()> {
        let Resampled { mut inner, resampler } = *self;
        let tail = resampler.finish()?;
        inner.write(&tail)?;
        inner.finish()
    }
}

/// Headerless signed 16-bit little-endian samples.
struct PcmSink {
    out: Output,
    bytes: Vec<u8>,
}

impl AudioSink for PcmSink {
    fn write(&mut self, samples: &[f32]) -> Result<()> {
        self.bytes.clear();
        self.bytes.extend(samples.iter().flat_map(|&x| to_i16(x).to_le_bytes()));
        self.out.put(&self.bytes)?;
        self.out.done()
    }
    fn finish(mut self: Box<Self>) -> Result<()> {
        self.out.done()
    }
}

fn wav_spec(float: bool, sample_rate: u32) -> hound::WavSpec {
    let (bits_per_sample, sample_format) =
        if float { (32, hound::SampleFormat::Float) } else { (16, hound::SampleFormat::Int) };
    hound::WavSpec { channels: 1, sample_rate, bits_per_sample, sample_format }
}

fn wav_sink(out: Output, float: bool, sample_rate: u32) -> Result<Box<dyn AudioSink>> {
    let spec = wav_spec(float, sample_rate);
    let Output { inner, name } = out;
    match inner {
        OutputKind::Seekable(w) => {
            let writer = hound::WavWriter::new(w, spec).map_err(|e| Error::invalid(format!("{name}: {e}")))?;
            Ok(Box::new(WavSink { writer: Some(writer), float, name }))
        }
        OutputKind::Stream(s) => {
            let mut out = Output { inner: OutputKind::Stream(s), name };
            out.put(&spec.into_header_for_infinite_file())?;
            Ok(Box::new(WavStreamSink { out, float, bytes: Vec::new() }))
        }
    }
}

/// WAV through hound; the header's sizes are brought up to date on every write.
struct WavSink {
    writer: Option<hound::WavWriter<Box<dyn SeekWrite>>>,
    float: bool,
    name: String,
}

impl WavSink {
    fn err(&self, e: hound::Error) -> Error {
        match e {
            hound::Error::IoError(io) => Error::io(&self.name, io),
            other => Error::invalid(format!("{}: {other}", self.name)),
        }
    }
}

impl AudioSink for WavSink {
    fn write(&mut self, samples: &[f32]) -> Result<()> {
        let w = self.writer.as_mut().expect("writer present until finish");
        let r = samples
            .iter()
            .try_for_each(|&x| if self.float { w.write_sample(x) } else { w.write_sample(to_i16(x)) })
            .and_then(|_| w.flush());
        r.map_err(|e| self.err(e))
    }
    fn finish(mut self: Box<Self>) -> Result<()> {
        let w = self.writer.take().expect("writer present until finish");
        w.finalize().map_err(|e| self.err(e))
    }
}

/// WAV to a pipe: open-ended header, then raw samples.
struct WavStreamSink {
    out: Output,
    float: bool,
    bytes: Vec<u8>,
}

impl AudioSink for WavStreamSink {
    fn write(&mut self, samples: &[f32]) -> Result<()> {
        self.bytes.clear();
        if self.float {
            self.bytes.extend(samples.iter().flat_map(|x| x.to_le_bytes()));
        } else {
            self.bytes.extend(samples.iter().flat_map(|&x| to_i16(x).to_le_bytes()));
        }
        self.out.put(&self.bytes)?;
        self.out.done()
    }
    fn finish(mut self: Box<Self>) -> Result<()> {
        self.out.done()
    }
}

/// An in-memory, seekable buffer that stays readable after the sink that owned it is gone.
#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Cursor<Vec<u8>>>>);

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Seek for SharedBuf {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.seek(pos)
    }
}

//! Decompression bombs: a small compressed file that decodes to far more audio than its bytes
//! suggest. `decode_audio_within` counts decoded frames and stops past `max_seconds`, before the
//! rest is decoded or allocated. Its own test binary: the peak-RSS figure is this process's.

#[path = "support/flac_bomb.rs"]
mod flac_bomb;

use infer_core::audio::Audio;
use infer_core::audio_io::{decode_audio, decode_audio_within, encode_audio, AudioFormat, DecodeFailure, DecodeLimits};

/// Peak resident memory of this process so far (VmHWM), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

fn within(seconds: f64) -> DecodeLimits {
    DecodeLimits { max_seconds: Some(seconds) }
}

#[test]
fn an_hour_of_flac_silence_stops_at_the_limit_with_bounded_memory() {
    // 40 KB of FLAC for an hour at 48 kHz: 172.8 M samples, 691 MB as f32.
    let bomb = flac_bomb::silent_flac(3600, 48_000);
    let bytes = bomb.len();
    assert!(bytes < 64 << 10, "{bytes} bytes");
    let before = peak_rss();
    let started = std::time::Instant::now();
    let err = decode_audio_within(bomb, Some("flac"), "bomb.flac", &within(60.0)).expect_err("refused");
    let grown = peak_rss().saturating_sub(before);
    match &err {
        DecodeFailure::TooLong { limit_seconds, reached_seconds, .. } => {
            assert_eq!(*limit_seconds, 60.0);
            // Stopped within one block (65535 samples, 1.4 s) of the limit.
            assert!((60.0..62.0).contains(reached_seconds), "{reached_seconds}");
        }
        other => panic!("expected TooLong, got {other}"),
    }
    let message = err.to_string();
    assert!(message.contains("bomb.flac") && message.contains("60 s") && message.contains("stopped at"), "{message}");
    // 60 s of f32 is 11.5 MB (a growing Vec may hold twice that); the whole hour would be 691 MB.
    assert!(grown < 150 << 20, "peak RSS grew {} MB", grown >> 20);
    // A generous liveness bound only (refusing took 20-30 ms here).
    assert!(started.elapsed().as_secs() < 60, "{:?}", started.elapsed());
    eprintln!("hour-long bomb: {} bytes, refused after {:?}, peak RSS +{} MB", bytes, started.elapsed(), grown >> 20);

    // The same construction is real FLAC: two minutes of it decode whole without a limit.
    let two_minutes = decode_audio(flac_bomb::silent_flac(120, 48_000), Some("flac"), "small.flac").unwrap();
    assert_eq!(two_minutes.info.sample_rate, 48_000);
    assert_eq!(two_minutes.info.frames, (120 * 48_000u64).div_ceil(65535) as usize * 65535);
    assert!(two_minutes.audio.samples.iter().all(|&x| x == 0.0));
}

/// A WAV whose data chunk claims 4 hours while the body holds 1 s: decoding reads what is there,
/// never the claim, and the limit is checked on the frames decoded.
#[test]
fn a_wav_claiming_hours_decodes_what_it_holds() {
    let rate = 16_000u32;
    let body = vec![0u8; rate as usize * 2];
    let claimed = 4 * 3600 * rate * 2;
    let mut wav = Vec::new();
    wav.extend(b"RIFF");
    wav.extend((claimed + 36).to_le_bytes());
    wav.extend(b"WAVEfmt ");
    wav.extend(16u32.to_le_bytes());
    wav.extend(1u16.to_le_bytes()); // PCM
    wav.extend(1u16.to_le_bytes()); // mono
    wav.extend(rate.to_le_bytes());
    wav.extend((rate * 2).to_le_bytes());
    wav.extend(2u16.to_le_bytes());
    wav.extend(16u16.to_le_bytes());
    wav.extend(b"data");
    wav.extend(claimed.to_le_bytes());
    wav.extend(&body);
    let before = peak_rss();
    let loaded = decode_audio_within(wav.clone(), Some("wav"), "liar.wav", &within(60.0)).unwrap();
    assert_eq!(loaded.audio.samples.len(), rate as usize);
    assert!(peak_rss().saturating_sub(before) < 64 << 20);
    let err = decode_audio_within(wav, Some("wav"), "liar.wav", &within(0.5)).expect_err("past 0.5 s");
    assert!(matches!(err, DecodeFailure::TooLong { .. }), "{err}");
}

/// Every format's decoder checks the limit: symphonia's (wav, flac, mp3) and the Ogg Opus reader.
#[test]
fn every_format_stops_past_the_limit() {
    let rate = 24_000;
    let tone: Vec<f32> = (0..rate * 3).map(|i| 0.3 * (i as f32 * 0.05).sin()).collect();
    let audio = Audio::new(tone, rate as u32);
    for format in [AudioFormat::Wav, AudioFormat::Flac, AudioFormat::Mp3, AudioFormat::Opus] {
        let bytes = encode_audio(&audio, format).unwrap();
        let name = format!("tone.{}", format.extension());
        let err = decode_audio_within(bytes.clone(), Some(format.extension()), &name, &within(1.0))
            .expect_err("3 s past a 1 s limit");
        match err {
            DecodeFailure::TooLong { limit_seconds, reached_seconds, .. } => {
                assert_eq!(limit_seconds, 1.0, "{format}");
                assert!(reached_seconds > 1.0 && reached_seconds < 2.0, "{format}: {reached_seconds}");
            }
            other => panic!("{format}: expected TooLong, got {other}"),
        }
        let whole = decode_audio_within(bytes, Some(format.extension()), &name, &within(10.0)).unwrap();
        assert!(whole.audio.duration_secs() > 2.9, "{format}");
    }
}

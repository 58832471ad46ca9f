//! Seeds of the server targets: request bodies as OpenAI clients send them, `server.toml` files,
//! and raw HTTP exchanges (JSON, multipart uploads, WebSocket upgrades with their frames).

use crate::fixture;

fn with_pick(pick: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![pick];
    out.extend_from_slice(bytes);
    out
}

const CHAT: &str = r#"{"model":"llm","messages":[{"role":"developer","content":"Be terse."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":" there"}]}],"temperature":0.7,"top_p":0.9,"top_k":40,"min_p":0.05,"repetition_penalty":1.1,"max_completion_tokens":3,"stop":["\n\n","END"],"seed":7,"stream":true,"stream_options":{"include_usage":true},"tools":[],"response_format":{"type":"text"},"n":1,"presence_penalty":0,"logit_bias":{}}"#;
const CHAT_SMALL: &str = r#"{"model":"llm","messages":[{"role":"user","content":"Hello"}],"max_tokens":2}"#;
const COMPLETION: &str = r#"{"model":"llm","prompt":"Once upon a time","max_tokens":3,"temperature":0,"stop":"."}"#;
const COMPLETION_IDS: &str =
    r#"{"model":"llm","prompt":[[1,2,3]],"max_tokens":2,"echo":false,"best_of":1,"logprobs":0,"suffix":""}"#;

/// First byte picks the endpoint (even: chat), then the body.
pub fn openai_request_seeds() -> Vec<(String, Vec<u8>)> {
    vec![
        ("chat_full".into(), with_pick(0, CHAT.as_bytes())),
        ("chat_small".into(), with_pick(0, CHAT_SMALL.as_bytes())),
        ("chat_refused".into(), with_pick(0, br#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}],"logprobs":true,"tools":[{"type":"function"}],"response_format":{"type":"json_object"},"n":2}"#)),
        ("completion_text".into(), with_pick(1, COMPLETION.as_bytes())),
        ("completion_ids".into(), with_pick(1, COMPLETION_IDS.as_bytes())),
        ("completion_texts".into(), with_pick(1, br#"{"model":"m","prompt":["a","b"],"max_tokens":-1,"seed":-5,"stop":["a","b","c","d","e"]}"#)),
    ]
}

/// The file itself.
pub fn server_toml_seeds() -> Vec<(String, Vec<u8>)> {
    let documented = "host = \"127.0.0.1\"\nport = 8080\nparallel = 4\nqueue = 64\n\n[[models]]\nname = \"gemma\"\n\
                      path = \"~/.cache/infer/models/gemma-3-270m-q4_k_m.gguf\"\nbackend = \"candle\"\ndtype = \"f32\"\n\
                      quant = \"q4_k\"\ncontext_len = 0\nparallel = 8\n";
    let every = "host = \"0.0.0.0\"\nport = 9000\napi_key = \"secret\"\nparallel = 2\nqueue = 8\ndefault_max_tokens = 256\n\
                 max_body_bytes = 1048576\nmax_upload_bytes = 2097152\nmax_audio_seconds = 60.5\nmax_tokens_limit = 4096\n\
                 request_timeout_secs = 0\nkv_budget_mib = 512\nheader_timeout_secs = 5\nbody_timeout_secs = 30\n\
                 idle_timeout_secs = 30\nws_idle_timeout_secs = 10\nws_max_message_bytes = 65536\nmetrics_require_key = true\n\
                 cors_origins = [\"*\", \"http://localhost:3000\"]\nallowed_hosts = [\"example.org\"]\nprepare_tasks = 2\n\
                 max_stop_bytes = 64\n\n[[models]]\npath = \"models/qwen.gguf\"\ndevice = \"cpu\"\nkv_dtype = \"bf16\"\n\n\
                 [[models]]\nname = \"tts\"\npath = \"/srv/qwen3-tts\"\nquant = \"q8_0\"\n";
    vec![("documented.toml".into(), documented.into()), ("every_field.toml".into(), every.into())]
}

fn request(method: &str, path: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n").into_bytes();
    for h in headers {
        out.extend(format!("{h}\r\n").as_bytes());
    }
    if !body.is_empty() {
        out.extend(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend(b"\r\n");
    out.extend(body);
    out
}

fn json_post(path: &str, body: &str, extra: &[&str]) -> Vec<u8> {
    let mut headers = vec!["Content-Type: application/json"];
    headers.extend(extra);
    request("POST", path, &headers, body.as_bytes())
}

/// A client's WebSocket frame: final, masked (RFC 6455 requires clients to mask).
fn ws_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut out = vec![0x80 | opcode];
    match payload.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n if n <= u16::MAX as usize => {
            out.push(0x80 | 126);
            out.extend((n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend((n as u64).to_be_bytes());
        }
    }
    out.extend(mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

fn multipart(fields: &[(&str, Option<&str>, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "infer-fuzz-boundary";
    let mut body = Vec::new();
    for (name, file, bytes) in fields {
        body.extend(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"").as_bytes());
        if let Some(f) = file {
            body.extend(format!("; filename=\"{f}\"\r\nContent-Type: application/octet-stream").as_bytes());
        }
        body.extend(b"\r\n\r\n");
        body.extend(*bytes);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{boundary}--\r\n").as_bytes());
    (format!("Content-Type: multipart/form-data; boundary={boundary}"), body)
}

/// First byte picks the server (even: open, odd: API key `k`), then the bytes of one connection.
pub fn http_server_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |name: &str, pick: u8, bytes: Vec<u8>| seeds.push((name.to_string(), with_pick(pick, &bytes)));
    add("health", 0, request("GET", "/health", &[], b""));
    add("index_metrics", 0, [request("GET", "/", &[], b""), request("GET", "/metrics", &[], b"")].concat());
    add(
        "models",
        1,
        [
            request("GET", "/v1/models", &["Authorization: Bearer k"], b""),
            request("GET", "/v1/models/llm", &["Authorization: Bearer wrong"], b""),
        ]
        .concat(),
    );
    add("chat_stream", 0, json_post("/v1/chat/completions", CHAT, &[]));
    add("chat", 1, json_post("/v1/chat/completions", CHAT_SMALL, &["Authorization: Bearer k"]));
    add("completion", 0, json_post("/v1/completions", COMPLETION, &[]));
    add(
        "completion_ids_pipelined",
        0,
        [json_post("/v1/completions", COMPLETION_IDS, &[]), request("GET", "/v1/models", &[], b"")].concat(),
    );
    add(
        "wrong_kind",
        0,
        json_post("/v1/chat/completions", r#"{"model":"asr","messages":[{"role":"user","content":"x"}]}"#, &[]),
    );
    add(
        "speech_no_model",
        0,
        json_post(
            "/v1/audio/speech",
            r#"{"model":"tts","input":"Hello","voice":"alloy","response_format":"wav","speed":1.0}"#,
            &[],
        ),
    );
    add(
        "cors_preflight",
        0,
        request(
            "OPTIONS",
            "/v1/chat/completions",
            &[
                "Origin: http://allowed.example",
                "Access-Control-Request-Method: POST",
                "Access-Control-Request-Headers: authorization, content-type",
            ],
            b"",
        ),
    );
    add("foreign_host", 0, request("GET", "/v1/models", &["Host: evil.example"], b""));
    add("chunked", 0, {
        let body = CHAT_SMALL.as_bytes();
        let mut r = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for part in body.chunks(16) {
            r.extend(format!("{:x}\r\n", part.len()).as_bytes());
            r.extend(part);
            r.extend(b"\r\n");
        }
        r.extend(b"0\r\n\r\n");
        r
    });
    add("too_large", 0, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 99999999999\r\nExpect: 100-continue\r\n\r\n{".to_vec());
    add("odd_headers", 1, {
        let mut r = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAuthorization: Bearer  k \r\nAuthorization: Bearer \xff\r\n".to_vec();
        r.extend(b"Content-Length: 0\r\nContent-Length: 5\r\nX-Long: ");
        r.extend([b'x'; 8192]);
        r.extend(b"\r\nContent-Type: application/json; charset=utf-16\r\n\r\n");
        r
    });
    add(
        "http10_keepalive",
        0,
        b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /metrics HTTP/1.0\r\n\r\n".to_vec(),
    );
    add(
        "not_found_method",
        0,
        [request("DELETE", "/v1/chat/completions", &[], b""), request("GET", "/v2/nothing?x=%ff", &[], b"")].concat(),
    );
    let wav = std::fs::read(fixture("audio/tone440_8k_mono_s16.wav")).expect("wav fixture");
    for (name, format) in [("transcription_json", "json"), ("transcription_text", "verbose_json")] {
        let (ct, body) = multipart(&[
            ("model", None, b"asr"),
            ("response_format", None, format.as_bytes()),
            ("language", None, b"en"),
            ("file", Some("tone.wav"), &wav),
        ]);
        add(name, 0, request("POST", "/v1/audio/transcriptions", &[&ct], &body));
    }
    let (ct, body) = multipart(&[("file", Some("x.mp3"), b"ID3\x03\x00"), ("model", None, b"llm")]);
    add(
        "transcription_bad_file",
        1,
        request("POST", "/v1/audio/transcriptions", &[&ct, "Authorization: Bearer k"], &body),
    );
    let upgrade = |query: &str| {
        request(
            "GET",
            &format!("/v1/audio/transcriptions/live?{query}"),
            &[
                "Connection: Upgrade",
                "Upgrade: websocket",
                "Sec-WebSocket-Version: 13",
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            ],
            b"",
        )
    };
    let pcm: Vec<u8> = (0..1600).flat_map(|i| (((i as f32 * 0.35).sin() * 8000.0) as i16).to_le_bytes()).collect();
    let f32s: Vec<u8> = (0..800).flat_map(|i| ((i as f32 * 0.2).sin() * 0.3).to_le_bytes()).collect();
    add(
        "live_pcm16",
        0,
        [upgrade("model=asr"), ws_frame(2, &pcm), ws_frame(9, b"ping"), ws_frame(1, br#"{"type":"end"}"#)].concat(),
    );
    add(
        "live_f32_resampled",
        0,
        [
            upgrade("model=asr&encoding=f32&sample_rate=8000&language=en"),
            ws_frame(2, &f32s),
            ws_frame(2, &[1, 2, 3]),
            ws_frame(8, &[0x03, 0xe8]),
        ]
        .concat(),
    );
    add("live_wrong_model", 0, [upgrade("model=llm"), ws_frame(1, br#"{"type":"end"}"#)].concat());
    seeds
}

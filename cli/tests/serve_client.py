"""Drives `infer serve` with the official `openai` client (cli/tests/serve.rs runs it).

    python serve_client.py BASE_URL API_KEY CASE [ARGS...]

Prints one JSON object with what the case observed; the Rust test compares it.
"""

import asyncio
import json
import os
import signal
import sys
import time

import openai


def client(base, key):
    return openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=300)


def case_models(c):
    return {"ids": [m.id for m in c.models.list().data]}


def case_chat(c, model, prompt, max_tokens):
    r = c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        temperature=0,
        max_tokens=int(max_tokens),
    )
    return {
        "text": r.choices[0].message.content,
        "role": r.choices[0].message.role,
        "finish_reason": r.choices[0].finish_reason,
        "usage": r.usage.model_dump(),
        "object": r.object,
    }


def case_chat_stream(c, model, prompt, max_tokens):
    stream = c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        temperature=0,
        max_completion_tokens=int(max_tokens),
        stream=True,
        stream_options={"include_usage": True},
    )
    text, chunks, finish, usage, roles = "", 0, None, None, []
    for chunk in stream:
        chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for ch in chunk.choices:
            if ch.delta.role:
                roles.append(ch.delta.role)
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    return {"text": text, "chunks": chunks, "finish_reason": finish, "usage": usage, "roles": roles}


def case_completion(c, model, prompt, max_tokens, stream):
    kw = dict(model=model, prompt=prompt, temperature=0, max_tokens=int(max_tokens), seed=1)
    if stream == "stream":
        text, finish = "", None
        for chunk in c.completions.create(stream=True, **kw):
            text += chunk.choices[0].text
            finish = chunk.choices[0].finish_reason or finish
        return {"text": text, "finish_reason": finish}
    r = c.completions.create(**kw)
    return {"text": r.choices[0].text, "finish_reason": r.choices[0].finish_reason, "usage": r.usage.model_dump()}


def case_completion_sigterm(c, model, prompt, max_tokens, pid):
    """A streamed completion that sends SIGTERM to the server (process `pid`) as soon as its
    first token chunk arrived; every chunk is recorded with whether it came after the signal."""
    kw = dict(model=model, prompt=prompt, temperature=0, max_tokens=int(max_tokens), seed=1)
    text, finish, chunks, signalled = "", None, [], False
    for chunk in c.completions.create(stream=True, **kw):
        piece = chunk.choices[0].text
        text += piece
        finish = chunk.choices[0].finish_reason or finish
        chunks.append({"text": piece, "after_signal": signalled})
        if piece and not signalled:
            os.kill(int(pid), signal.SIGTERM)
            signalled = True
    return {"text": text, "finish_reason": finish, "chunks": chunks}


def case_speech(c, model, out_dir):
    sizes = {}
    for fmt in ["wav", "pcm", "flac", "mp3", "opus"]:
        r = c.audio.speech.create(model=model, input="Hello from the server.", voice="default",
                                  response_format=fmt, extra_body={"temperature": 0, "max_frames": 12})
        path = f"{out_dir}/speech.{fmt}"
        r.write_to_file(path)
        sizes[fmt] = len(r.content)
    with c.audio.speech.with_streaming_response.create(
        model=model, input="Hello from the server.", voice="default", response_format="wav",
        extra_body={"temperature": 0, "max_frames": 12, "stream_format": "audio"},
    ) as r:
        parts = [p for p in r.iter_bytes() if p]
    with open(f"{out_dir}/streamed.wav", "wb") as f:
        f.write(b"".join(parts))
    return {"sizes": sizes, "streamed_parts": len(parts)}


def error_of(fn):
    try:
        fn()
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        return {"status": e.status_code, "class": type(e).__name__, "param": body.get("param"),
                "message": body.get("message"), "retry_after": e.response.headers.get("retry-after")}
    return {"status": 200}


def case_errors(c, model, tts):
    msg = [{"role": "user", "content": "hi"}]
    return {
        "unknown_model": error_of(lambda: c.chat.completions.create(model="no-such-model", messages=msg)),
        "penalty": error_of(lambda: c.chat.completions.create(model=model, messages=msg, presence_penalty=2.5)),
        "temperature": error_of(lambda: c.chat.completions.create(model=model, messages=msg, temperature=5)),
        "wrong_kind": error_of(lambda: c.audio.speech.create(model=model, input="x", voice="default")),
        "aac": error_of(lambda: c.audio.speech.create(model=tts, input="x", voice="default", response_format="aac")),
        "voice": error_of(lambda: c.audio.speech.create(model=tts, input="x", voice="alloy")),
        "chat_on_tts": error_of(lambda: c.chat.completions.create(model=tts, messages=msg)),
        "transcription": error_of(lambda: c.audio.transcriptions.create(model=tts, file=("a.wav", b"RIFF"))),
        "too_long": error_of(lambda: c.completions.create(model=model, prompt=[1] * 40000, max_tokens=1)),
    }


def case_transcribe(c, model, wav, big, base):
    """Every response format, streaming, and the upload errors, on one recording."""
    data = open(wav, "rb").read()
    upload = ("speech.wav", data)
    as_json = c.audio.transcriptions.create(model=model, file=upload)
    as_text = c.audio.transcriptions.create(model=model, file=upload, response_format="text")
    verbose = c.audio.transcriptions.create(model=model, file=upload, response_format="verbose_json")
    deltas, done, types = "", None, []
    for event in c.audio.transcriptions.create(model=model, file=upload, stream=True):
        types.append(event.type)
        if event.type == "transcript.text.delta":
            deltas += event.delta
        elif event.type == "transcript.text.done":
            done = event.text
    # The openai client always sends a file: a form without one is posted by hand.
    import urllib.error
    import urllib.request
    form = (b"--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n" + model.encode()
            + b"\r\n--XyZ--\r\n")
    req = urllib.request.Request(f"{base}/audio/transcriptions", data=form,
                                 headers={"Content-Type": "multipart/form-data; boundary=XyZ"})
    try:
        urllib.request.urlopen(req, timeout=60)
        missing = {"status": 200}
    except urllib.error.HTTPError as e:
        missing = {"status": e.code, **json.loads(e.read())["error"]}
    return {
        "json": as_json.text,
        "text": as_text,
        "verbose": {"text": verbose.text, "duration": verbose.duration, "task": verbose.task},
        "stream": {"deltas": deltas, "done": done, "types": sorted(set(types))},
        "errors": {
            "not_audio": error_of(lambda: c.audio.transcriptions.create(
                model=model, file=("notes.wav", b"these are not the samples you are looking for" * 20))),
            "too_large": error_of(lambda: c.audio.transcriptions.create(
                model=model, file=("big.wav", open(big, "rb").read()))),
            "srt": error_of(lambda: c.audio.transcriptions.create(model=model, file=upload, response_format="srt")),
            "missing_file": missing,
        },
    }


def case_auth(base, key):
    return {
        "wrong": error_of(lambda: client(base, "wrong-key").models.list()),
        "right": [m.id for m in client(base, key).models.list().data],
    }


# What a stream the client drops asks for (with `ignore_eos`): far more than the few chunks it
# reads, so the server is still generating it when the connection closes.
CANCELLED_MAX_TOKENS = 256


async def case_load(base, key, model, n, max_tokens):
    """`n` concurrent streaming chats over 16 distinct prompts; every fourth asks for a long
    generation and is dropped after a few chunks. Then each prompt that completed is run alone,
    one at a time, for reference. `cancelled` is true for a stream closed before it finished."""
    c = openai.AsyncOpenAI(base_url=base, api_key=key, max_retries=0, timeout=600)
    prompts = [f"Count from {i % 16} to {i % 16 + 20}, one number per line." for i in range(int(n))]

    async def one(i, cancel):
        if cancel:
            limits = {"max_tokens": CANCELLED_MAX_TOKENS, "extra_body": {"ignore_eos": True}}
        else:
            limits = {"max_tokens": int(max_tokens)}
        stream = await c.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompts[i]}], temperature=0,
            stream=True, **limits)
        text, chunks, finish = "", 0, None
        async for chunk in stream:
            chunks += 1
            for ch in chunk.choices:
                text += ch.delta.content or ""
                finish = ch.finish_reason or finish
            if cancel and chunks >= 3 and finish is None:
                await stream.close()
                return {"prompt": prompts[i], "cancelled": True, "text": text}
        return {"prompt": prompts[i], "cancelled": False, "text": text, "finish_reason": finish}

    start = time.time()
    results = await asyncio.gather(*(one(i, i % 4 == 3) for i in range(int(n))), return_exceptions=True)
    seconds = time.time() - start
    out = []
    for r in results:
        out.append({"error": repr(r)} if isinstance(r, BaseException) else r)
    solo = {}
    for r in out:
        if not r.get("cancelled", True) and r["prompt"] not in solo:
            solo[r["prompt"]] = (await one(prompts.index(r["prompt"]), False))["text"]
    return {"results": out, "solo": solo, "seconds": seconds}


def main():
    base, key, case, *args = sys.argv[1:]
    c = client(base, key)
    if case == "auth":
        result = case_auth(base, key)
    elif case == "transcribe":
        result = case_transcribe(c, *args, base)
    elif case == "load":
        result = asyncio.run(case_load(base, key, *args))
    else:
        result = globals()[f"case_{case.replace('-', '_')}"](c, *args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

//! The embedding example runs and prints transformers' transcript of the tiny Voxtral Realtime
//! fixture, and README.md shows its code as it is.

use infer_tests::cli::{stderr, stdout, Infer};
use infer_tests::{fixture, repo_root};

#[test]
fn the_example_transcribes_the_fixture() {
    let root = fixture("voxtral-realtime");
    let goldens: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("goldens.json")).unwrap()).unwrap();
    let audio = root.join(goldens["audio"].as_str().unwrap());
    let text = goldens["cases"][0]["text"].as_str().unwrap();
    for layout in ["hf", "mistral"] {
        let model = root.join(layout);
        let o =
            Infer::new(env!("CARGO_BIN_EXE_transcribe-host")).run(&[model.to_str().unwrap(), audio.to_str().unwrap()]);
        assert!(o.status.success(), "{layout}: {}", stderr(&o));
        assert_eq!(stdout(&o), format!("{text}\n"), "{layout}");
    }
}

#[test]
fn the_readme_shows_the_example_as_it_is() {
    let main = std::fs::read_to_string(repo_root().join("examples/transcribe-host/src/main.rs")).unwrap();
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let snippet = main.split("// README: begin\n").nth(1).unwrap().split("// README: end").next().unwrap().trim_end();
    // The README's copy is the same code, one indent level out.
    let unindented: String = snippet.lines().map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l))).collect();
    assert!(
        readme.contains(&unindented),
        "README.md's recognizer example differs from the example's code:\n{unindented}"
    );
}

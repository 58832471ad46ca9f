//! A valid shared library that is not an infer plugin: it exports a C function and nothing else.

#[no_mangle]
pub extern "C" fn infer_test_answer() -> u32 {
    42
}

//! Plugin declarations ([`infer_sdk::plugin`]) and, on the host side, loading plugin libraries.

pub use infer_sdk::plugin::*;

pub mod library;

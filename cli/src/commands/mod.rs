pub mod bench;
pub mod chat;
pub mod info;
pub mod plugins;
pub mod run;
pub mod shared;
pub mod speak;
pub mod voice;

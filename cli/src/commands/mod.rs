pub mod info;
pub mod plugins;
pub mod run;
pub mod shared;

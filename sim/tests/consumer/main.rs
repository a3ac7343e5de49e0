//! The consumer's cases one by one, through the real handler, the memory store and the terminal
//! simulator over HTTP on loopback.

mod deliveries;
mod routing;
mod terminal_faults;
mod world;

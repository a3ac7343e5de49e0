//! The outside world for local runs: the terminal simulator, at-least-once SQS delivery, the
//! naive handler of the incident, scenario files and the replay.
pub mod delivery;
pub mod naive;
pub mod replay;
pub mod report;
pub mod scenario;
pub mod stores;
pub mod terminal;

//! The outside world for local runs: the terminal simulator, at-least-once SQS delivery (from the
//! webhook sender through the ingress, `webhook`, or straight onto the queue), the
//! naive handler of the incident, scenario files and the replay, and the sample events of
//! `events/` dated for today, and the false-page arithmetic of the alarms (`alarm_stats`).
pub mod alarm_stats;
pub mod bench_replay;
pub mod dst;
pub mod plot;
pub mod recovery;
pub mod replay;
pub mod report;
pub mod sample_events;
pub mod scenario;
pub mod scenarios;
pub mod signals;
pub mod sqs;
pub mod stores;
pub mod sustained;
pub mod terminal;
pub mod webhook;

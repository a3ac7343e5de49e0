//! Several invocations at once in one execution environment: Lambda Managed Instances run up to `AWS_LAMBDA_MAX_CONCURRENCY` invocations at once in one
//! execution environment (one process); classic Lambda runs one at a time. Every function's loop
//! is `lambda_runtime::run_concurrent` (crate feature `concurrency-tokio`): with the variable
//! unset or `1` it polls the Runtime API for one invocation at a time, as `lambda_runtime::run`
//! does; with `N > 1` it runs `N` polling loops, each handing its invocation to a clone of the
//! handler on the same tokio runtime (a multi-thread one then, [`tokio_runtime`]).
//!
//! What makes the functions correct there, and where it lives:
//!
//! | per invocation | from |
//! | --- | --- |
//! | deadline, request id, lease tokens (`{request id}/{nonce}#{n}`) | its own context ([`super::runner::invocation`]) |
//! | the store budget (its calls end before it must answer) | a tokio task-local opened per invocation (`gate::store::budget::scope`) |
//! | its counters | one EMF document with its request id ([`super::emf::Emf`]), no process-wide registry |
//! | its log lines' request id | `lambda_runtime`'s span per invocation (`requestId`), which instruments the handler's future |
//!
//! What the invocations share holds no state of one of them: the configuration and the clients
//! (built once at cold start), the store's connections (DynamoDB's HTTP pool; PostgreSQL's pool
//! of `DATABASE_POOL_SIZE`), the integration (its call permits are per environment), the
//! per-process key of the answer digests, and the cold-start flag of the EMF writer.

/// The variable Lambda Managed Instances set to the invocations one environment runs at once.
pub const MAX_CONCURRENCY_VARIABLE: &str = "AWS_LAMBDA_MAX_CONCURRENCY";

/// The invocations this environment runs at once, read through `lookup` as `lambda_runtime`
/// 1.5 reads [`MAX_CONCURRENCY_VARIABLE`]: a positive integer, else 1 (unset, empty, `0` or not
/// a number: one at a time). For the start line and the advice on a pool's size; the runtime
/// reads the variable itself.
pub fn invocations_at_once(lookup: impl Fn(&str) -> Option<String>) -> u32 {
    lookup(MAX_CONCURRENCY_VARIABLE)
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

/// The tokio runtime a function's `main` runs its loop on, chosen by [`invocations_at_once`]
/// (read from the environment): one at a time, a current-thread runtime (measured cheaper for
/// one batch at a time: docs/BENCHMARKS.md, "Client CPU against its floor"); several, a
/// multi-thread runtime with one worker per CPU the process may use, so that the concurrent
/// invocations of a Lambda Managed Instances environment (default: 8 per vCPU for Rust, AWS
/// Lambda Developer Guide, "Rust support for Lambda Managed Instances") share its vCPUs.
///
/// # Errors
/// The runtime cannot be built (the OS refused a thread or the I/O driver).
pub fn tokio_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if invocations_at_once(|k| std::env::var(k).ok()) > 1 {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all().build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_is_read_as_the_runtime_reads_it() {
        let with = |v: Option<&'static str>| {
            invocations_at_once(move |k| {
                assert_eq!(k, MAX_CONCURRENCY_VARIABLE);
                v.map(str::to_string)
            })
        };
        assert_eq!(with(None), 1);
        assert_eq!(with(Some("")), 1);
        assert_eq!(with(Some("0")), 1);
        assert_eq!(with(Some("-3")), 1);
        assert_eq!(with(Some("many")), 1);
        assert_eq!(with(Some("1")), 1);
        assert_eq!(with(Some("64")), 64);
    }
}

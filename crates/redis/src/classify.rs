//! Redis's errors told apart: an outage (the failure policy of the
//! resilience wrapper applies) or a data error (returned).

use ratelab_core::Error;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// A Redis error as an outage ([`Error::Backend`]: the connection, a
/// cluster moving or down, a server loading or busy) or a data error
/// ([`Error::Data`]: Redis answered, and what it said is about the key or
/// the server's state, not its reachability: `WRONGTYPE`, `OOM`, corrupt
/// state, a script error).
pub(crate) fn classify(error: RedisError) -> Error {
    let outage = match error.kind() {
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly,
        ) => true,
        ErrorKind::Server(_) | ErrorKind::Parse | ErrorKind::UnexpectedReturnType => false,
        // A script running too long elsewhere blocks the server: it will pass.
        ErrorKind::Extension => matches!(error.code(), Some("BUSY")),
        // I/O, the client, a cluster node not found, authentication.
        _ => true,
    };
    if outage {
        return Error::backend(error);
    }
    if error.code() == Some("ratelab") && error.detail().is_some_and(|d| d.starts_with("expired")) {
        // The script started after the deadline on Redis's clock: the
        // server (or this host, a loaded one polls its timer late) was too
        // slow, or this host's clock moved against Redis's since it was
        // measured. An outage either way, and nothing was charged.
        return Error::backend(format!(
            "Redis ran the call after its deadline (the caller's give-up instant on Redis's \
             measured clock): too slow, or a clock skew since the last measurement; nothing \
             was charged ({error})"
        ));
    }
    // The server's own words, `<code> <detail>`: "ratelab gcra: corrupt
    // state at ...", "WRONGTYPE ...", "OOM ...".
    match (error.code(), error.detail()) {
        (Some(code), Some(detail)) => Error::data(format!("{code} {detail}")),
        _ => Error::data(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::ErrorKind as Kind;

    fn server(code: &str, detail: &str) -> RedisError {
        redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
    }

    #[test]
    fn outages_and_data_errors_are_told_apart() {
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(classify(io).kind(), Kind::Backend);
        assert_eq!(classify(server("BUSY", "a script")).kind(), Kind::Backend);
        for (code, detail) in [
            ("OOM", "command not allowed when used memory > 'maxmemory'."),
            (
                "WRONGTYPE",
                "Operation against a key holding the wrong kind of value",
            ),
            (
                "ratelab",
                "gcra: corrupt state at k: not a timestamp: \"abc\"",
            ),
        ] {
            let error = classify(server(code, detail));
            assert_eq!(error.kind(), Kind::Data);
            assert!(!error.is_unavailable());
            assert!(
                error.to_string().ends_with(&format!(": {code} {detail}")),
                "{error}"
            );
        }
        // An expired call: an outage, nothing charged.
        let late = classify(server("ratelab", "expired: ran 5 us after its deadline"));
        assert_eq!(late.kind(), Kind::Backend);
        assert!(late.to_string().contains("nothing was charged"), "{late}");
    }
}

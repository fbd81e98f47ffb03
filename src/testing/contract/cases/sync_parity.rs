//! Sync parity: the blocking facade. Waits on the blocking-facade work (issue 4): these
//! tests skip visibly until `sandboxio::sync` exists.

use super::super::Row;
use super::Case;

const WAITING: &str = "waiting on the blocking facade (sandboxio::sync, issue 4)";

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(Row::SyncParity, "sync_parity__every_async_member_has_a_blocking_twin", |_| {
            Box::pin(async { Err(WAITING.to_owned()) })
        })
        .pending(WAITING),
        Case::new(Row::SyncParity, "sync_parity__errors_through_the_facade_keep_code_and_source", |_| {
            Box::pin(async { Err(WAITING.to_owned()) })
        })
        .pending(WAITING),
        Case::new(Row::SyncParity, "sync_parity__the_portal_stops_when_the_last_handle_is_dropped", |_| {
            Box::pin(async { Err(WAITING.to_owned()) })
        })
        .pending(WAITING),
    ]
}

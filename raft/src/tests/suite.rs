//! openraft's own storage suite against LogStore + StateMachine over real stores in a tempdir.

// openraft's storage traits return `openraft::StorageError` (~200 bytes) by value; helpers
// return the same type so `?` reaches the trait boundary without boxing and unboxing.
#![allow(clippy::result_large_err)]

use openraft::storage::RaftLogStorage;
use openraft::testing::{StoreBuilder, Suite};
use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageIOError};
use tempfile::TempDir;

use super::fixtures::{open_stores, Recorder};
use crate::log_store::LogStore;
use crate::state_machine::StateMachine;
use crate::types::{OrStorageError, TypeConfig};

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), OrStorageError> {
        let dir = tempfile::tempdir().map_err(|e| {
            OrStorageError::from(StorageIOError::new(
                ErrorSubject::Store,
                ErrorVerb::Write,
                AnyError::new(&e),
            ))
        })?;
        let (log, store) = open_stores(dir.path());
        let log_store = LogStore::open(log, store.clone())?;
        let (sm, _gone) = StateMachine::open(Recorder::new(None), store)?;
        Ok((dir, log_store, sm))
    }
}

/// A fresh runtime per case, as openraft's private `run_fut` does, so no task leaks between cases.
fn run_fut<F: std::future::Future<Output = Result<(), OrStorageError>>>(
    f: F,
) -> Result<(), OrStorageError> {
    tokio::runtime::Runtime::new().unwrap().block_on(f)
}

type S = Suite<TypeConfig, LogStore, StateMachine, Builder, TempDir>;

/// Runs one case of the suite on a fresh store, in a fresh runtime, as `Suite::test_store` does.
fn case<F, Fu>(name: &str, f: F)
where
    F: FnOnce(LogStore, StateMachine) -> Fu,
    Fu: std::future::Future<Output = Result<(), OrStorageError>>,
{
    let result = run_fut(async {
        let (_dir, store, sm) = Builder.build().await?;
        f(store, sm).await
    });
    if let Err(e) = result {
        panic!("openraft suite case {name} failed: {e}");
    }
}

/// Every case of `Suite::test_store` (openraft =0.9.25, pinned: re-check this list when it
/// moves), in its order, but one: see
/// `suite_case_with_a_hole_is_refused`.
#[test]
fn openraft_storage_suite() {
    case(
        "last_membership_in_log_initial",
        S::last_membership_in_log_initial,
    );
    case("last_membership_in_log", S::last_membership_in_log);
    case(
        "last_membership_in_log_multi_step",
        S::last_membership_in_log_multi_step,
    );
    case("get_membership_initial", S::get_membership_initial);
    case(
        "get_membership_from_log_and_empty_sm",
        S::get_membership_from_log_and_empty_sm,
    );
    case(
        "get_membership_from_empty_log_and_sm",
        S::get_membership_from_empty_log_and_sm,
    );
    case(
        "get_membership_from_log_le_sm_last_applied",
        S::get_membership_from_log_le_sm_last_applied,
    );
    case(
        "get_membership_from_log_gt_sm_last_applied_1",
        S::get_membership_from_log_gt_sm_last_applied_1,
    );
    case(
        "get_membership_from_log_gt_sm_last_applied_2",
        S::get_membership_from_log_gt_sm_last_applied_2,
    );
    case(
        "get_initial_state_without_init",
        S::get_initial_state_without_init,
    );
    case(
        "get_initial_state_with_state",
        S::get_initial_state_with_state,
    );
    case(
        "get_initial_state_last_log_gt_sm",
        S::get_initial_state_last_log_gt_sm,
    );
    case(
        "get_initial_state_last_log_lt_sm",
        S::get_initial_state_last_log_lt_sm,
    );
    case("get_initial_state_log_ids", S::get_initial_state_log_ids);
    case(
        "get_initial_state_re_apply_committed",
        S::get_initial_state_re_apply_committed,
    );
    case("save_vote", S::save_vote);
    case("get_log_entries", S::get_log_entries);
    case("limited_get_log_entries", S::limited_get_log_entries);
    case("try_get_log_entry", S::try_get_log_entry);
    case("initial_logs", S::initial_logs);
    case("get_log_state", S::get_log_state);
    case("get_log_id", S::get_log_id);
    case("last_id_in_log", S::last_id_in_log);
    case("last_applied_state", S::last_applied_state);
    case("purge_logs_upto_0", S::purge_logs_upto_0);
    case("purge_logs_upto_5", S::purge_logs_upto_5);
    case("purge_logs_upto_20", S::purge_logs_upto_20);
    case("delete_logs_since_11", S::delete_logs_since_11);
    case("delete_logs_since_0", S::delete_logs_since_0);
    case("append_to_log", S::append_to_log);
    case("snapshot_meta", S::snapshot_meta);
    case("apply_single", S::apply_single);
    case("apply_multiple", S::apply_multiple);
    if let Err(e) = run_fut(S::transfer_snapshot(&Builder)) {
        panic!("openraft suite case transfer_snapshot failed: {e}");
    }
}

/// `get_initial_state_membership_from_log_and_sm` appends index 3 right after index 1. The
/// openraft contract forbids holes and openraft itself never makes one; SegmentLog refuses a
/// non-contiguous append, so this store fails that case by design instead of storing a hole.
#[test]
fn suite_case_with_a_hole_is_refused() {
    let result = run_fut(async {
        let (_dir, store, sm) = Builder.build().await?;
        S::get_initial_state_membership_from_log_and_sm(store, sm).await
    });
    let err = result.expect_err("a hole must be refused");
    assert!(err.to_string().contains("expected index 2, got 3"), "{err}");
}

#[test]
fn suite_builder_stores_are_independent() {
    // Every build must be a fresh, empty store; the suite relies on it.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (_d1, mut a, _) = Builder.build().await.unwrap();
        let (_d2, mut b, _) = Builder.build().await.unwrap();
        a.save_vote(&openraft::Vote::new(3, 1)).await.unwrap();
        assert_eq!(b.read_vote().await.unwrap(), None);
    });
}

//! Postgres for the tests: one throwaway cluster per test binary
//! (`jarvis_sdk::testing::TempPostgres`), one fresh schema per test.

use std::sync::atomic::{AtomicUsize, Ordering};

use jarvis_sdk::testing::TempPostgres;
use tokio_postgres::NoTls;

/// A connection to the shared cluster's `postgres` database.
pub(crate) async fn admin(cluster: &TempPostgres) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&cluster.url(), NoTls)
        .await
        .expect("the test cluster accepts connections");
    tokio::spawn(connection);
    client
}

/// The connection string of a fresh, empty schema of the shared cluster
/// (its name second), or `None` (after a loud skip line) without Postgres.
pub(crate) async fn fresh_schema(what: &str) -> Option<(String, String)> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let cluster = TempPostgres::shared_or_skip(what)?;
    let schema = format!("t{}", NEXT.fetch_add(1, Ordering::Relaxed));
    admin(cluster)
        .await
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .expect("a schema can be created");
    Some((
        format!("{} options='-c search_path={schema}'", cluster.url()),
        schema,
    ))
}

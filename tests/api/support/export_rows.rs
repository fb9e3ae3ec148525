//! An export's rows as the tests read them back, from CSV or JSON lines:
//! every row checked against export's columns, with the `tenant_id` column
//! of `export --all-tenants` when the file has one.

/// One exported row: (tenant_id, merchant, customer, PM, PMT, connector,
/// outcome, count); the tenant is `None` when the file has no such column.
pub type TenantRow = (
    Option<String>,
    String,
    String,
    String,
    String,
    String,
    String,
    i64,
);

/// The rows of a CSV export, sorted, and whether its header has a
/// `tenant_id` column (first, then import's columns and `count`).
pub fn csv_rows(text: &[u8]) -> (bool, Vec<TenantRow>) {
    let mut reader = csv::Reader::from_reader(text);
    let header: Vec<String> = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_owned)
        .collect();
    let with_tenant = header.first().is_some_and(|c| c == "tenant_id");
    let columns = &header[usize::from(with_tenant)..];
    assert_eq!(
        columns,
        [
            "merchant_id",
            "customer_id",
            "payment_method",
            "payment_method_type",
            "connector",
            "outcome",
            "count"
        ]
    );
    let mut rows: Vec<TenantRow> = reader
        .records()
        .map(|record| {
            let record = record.unwrap();
            let skip = usize::from(with_tenant);
            let field = |i: usize| record.get(skip + i).unwrap().to_owned();
            (
                with_tenant.then(|| record.get(0).unwrap().to_owned()),
                field(0),
                field(1),
                field(2),
                field(3),
                field(4),
                field(5),
                field(6).parse().unwrap(),
            )
        })
        .collect();
    rows.sort();
    (with_tenant, rows)
}

/// The rows of a JSON-lines export, sorted: every line has `tenant_id`, or
/// none does; every count a JSON integer.
pub fn jsonl_rows(text: &[u8]) -> (bool, Vec<TenantRow>) {
    let text = std::str::from_utf8(text).unwrap();
    let objects: Vec<serde_json::Map<String, serde_json::Value>> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let with_tenant = objects.iter().any(|o| o.contains_key("tenant_id"));
    let mut rows: Vec<TenantRow> = objects
        .iter()
        .map(|object| {
            assert_eq!(object.len(), 7 + usize::from(with_tenant), "{object:?}");
            assert!(object["count"].is_i64(), "{object:?}");
            let field = |name: &str| object[name].as_str().unwrap().to_owned();
            (
                with_tenant.then(|| field("tenant_id")),
                field("merchant_id"),
                field("customer_id"),
                field("payment_method"),
                field("payment_method_type"),
                field("connector"),
                field("outcome"),
                object["count"].as_i64().unwrap(),
            )
        })
        .collect();
    rows.sort();
    (with_tenant, rows)
}

/// One row of an export without a tenant column: merchant, customer, PM,
/// PMT, connector, outcome, count.
pub type Row = (String, String, String, String, String, String, i64);

/// The rows of an export that must have no `tenant_id` column.
pub fn untenanted((with_tenant, rows): (bool, Vec<TenantRow>)) -> Vec<Row> {
    assert!(!with_tenant, "the export has a tenant_id column");
    rows.into_iter()
        .map(
            |(_, merchant, customer, method, method_type, connector, outcome, count)| {
                (
                    merchant,
                    customer,
                    method,
                    method_type,
                    connector,
                    outcome,
                    count,
                )
            },
        )
        .collect()
}

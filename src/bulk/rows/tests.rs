use super::*;

fn read_all(format: Format, text: &str) -> Vec<Parsed> {
    let input: Box<dyn Read + Send> = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
    let mut reader = RowReader::new(input, format, Arc::default()).unwrap();
    std::iter::from_fn(|| reader.next_row().map(Result::unwrap)).collect()
}

fn bad(parsed: &Parsed) -> (u64, &str) {
    match parsed {
        Parsed::Bad { line, reason } => (*line, reason.as_str()),
        Parsed::Row(row) => panic!("line {} should be bad", row.line),
    }
}

fn good(parsed: &Parsed) -> &Row {
    match parsed {
        Parsed::Row(row) => row,
        Parsed::Bad { line, reason } => panic!("line {line}: {reason}"),
    }
}

#[test]
fn csv_columns_come_in_any_order_and_count_defaults_to_one() {
    let rows = read_all(
        Format::Csv,
        "outcome,customer_id,merchant_id,payment_method,payment_method_type,connector,count\n\
         success,c1,m1,card,credit,stripe,\n\
         gateway_failure,c1,m1,card,credit,stripe,7\n",
    );
    let first = good(&rows[0]);
    assert_eq!((first.line, first.times), (2, 1));
    assert_eq!(first.command.combo.field(), "CARD:CREDIT:stripe");
    assert_eq!(first.command.outcome, Outcome::Success);
    let second = good(&rows[1]);
    assert_eq!((second.line, second.times), (3, 7));
    assert_eq!(second.command.outcome, Outcome::GatewayFailure);
    assert!(second.command.attempt.is_none());
}

#[test]
fn bad_csv_rows_name_their_physical_line_and_field_never_the_customer() {
    let rows = read_all(
        Format::Csv,
        "merchant_id,customer_id,payment_method,payment_method_type,connector,outcome,count,attempt_id\n\
         m1,\"secret\ncustomer\",card,credit,stripe,success,1,\n\
         m1,secret-customer,card,credit,stripe,refund,1,\n\
         m1,secret-customer,card,credit,stripe,success,0,\n\
         m1,secret-customer,ca:rd,credit,stripe,success,,\n\
         m1,secret-customer,card\n\
         m1,secret-customer,card,credit,stripe,success,1000000001,\n\
         m1,secret-customer,card,credit,stripe,success,+5,\n\
         m1,secret-customer,card,credit,stripe,success,2,a1\n",
    );
    let expected = [
        (2, "customer_id"),
        (4, "outcome"),
        (5, "count"),
        (6, "payment_method"),
        (7, "payment_method_type: missing"),
        (8, "count"),
        (9, "count"),
    ];
    for (parsed, (line, field)) in rows.iter().zip(expected) {
        let (got_line, reason) = bad(parsed);
        assert_eq!(got_line, line, "{reason}");
        assert!(reason.starts_with(field), "line {line}: {reason}");
        assert!(!reason.contains("secret"), "line {line}: {reason}");
    }
    let last = good(&rows[7]);
    assert_eq!((last.line, last.times), (10, 2));
    assert!(last.command.attempt.is_some());
}

/// A row obeys the API's blank rule, in every field: ASCII blanks at the
/// ends are trimmed, and any other blank there is refused by the field's
/// name, so `c1` and `c1` followed by NBSP never become one customer.
#[test]
fn only_ascii_blanks_are_trimmed_from_a_rows_fields() {
    let rows = read_all(
        Format::Csv,
        "merchant_id,customer_id,payment_method,payment_method_type,connector,outcome,count,attempt_id\n\
         \tm1 , c1\t,card, credit ,stripe, success , 2 , a1 \n\
         m1,c1\u{A0},card,credit,stripe,success,1,\n\
         \u{2028}m1,c1,card,credit,stripe,success,1,\n\
         m1,c1,card\u{3000},credit,stripe,success,1,\n\
         m1,c1,card,credit,stripe,success\u{2028},1,\n\
         m1,c1,card,credit,stripe,success,1\u{85},\n\
         m1,c1,card,credit,stripe,success,1,a1\u{A0}\n",
    );
    let first = good(&rows[0]);
    assert_eq!(first.command.customer.as_str(), "c1");
    assert_eq!(first.command.merchant.as_str(), "m1");
    assert_eq!(first.command.combo.field(), "CARD:CREDIT:stripe");
    assert_eq!(first.times, 2);
    let expected = [
        (3, "customer_id:"),
        (4, "merchant_id:"),
        (5, "payment_method:"),
        (6, "outcome:"),
        (7, "count:"),
        (8, "attempt_id:"),
    ];
    assert_eq!(rows.len(), 1 + expected.len());
    for (parsed, (line, field)) in rows[1..].iter().zip(expected) {
        let (got_line, reason) = bad(parsed);
        assert_eq!(got_line, line, "{reason}");
        assert!(reason.starts_with(field), "line {line}: {reason}");
    }
}

#[test]
fn a_csv_header_without_a_needed_column_stops_the_file() {
    let input: Box<dyn Read + Send> = Box::new(std::io::Cursor::new(
        b"merchant_id,customer_id\nm,c\n".to_vec(),
    ));
    let error = RowReader::new(input, Format::Csv, Arc::default())
        .err()
        .unwrap();
    assert!(error.to_string().contains("`payment_method`"), "{error}");
}

#[test]
fn jsonl_counts_are_numbers_or_digit_strings_and_blank_lines_are_not_rows() {
    let rows = read_all(
        Format::Jsonl,
        "{\"merchant_id\":\"m\",\"customer_id\":\"c\",\"payment_method\":\"card\",\"payment_method_type\":\"debit\",\"connector\":\"adyen\",\"outcome\":\"success\",\"count\":3}\n\
         \n\
         {\"merchant_id\":\"m\",\"customer_id\":\"c\",\"payment_method\":\"card\",\"payment_method_type\":\"debit\",\"connector\":\"adyen\",\"outcome\":\"gateway_failure\",\"count\":\"4\",\"attempt_id\":null}\n\
         {\"merchant_id\":\"m\",\"customer_id\":\"c\",\"payment_method\":\"card\",\"payment_method_type\":\"debit\",\"connector\":\"adyen\",\"outcome\":\"success\",\"count\":-1}\n\
         {\"merchant_id\":\"m\",\"customer_id\":7}\n\
         [1,2]\n\
         {not json\n",
    );
    assert_eq!(good(&rows[0]).times, 3);
    assert_eq!((good(&rows[1]).line, good(&rows[1]).times), (3, 4));
    assert_eq!(bad(&rows[2]).0, 4);
    assert!(bad(&rows[2]).1.starts_with("count"));
    assert_eq!(bad(&rows[3]), (5, "customer_id: must be a string"));
    assert_eq!(bad(&rows[4]), (6, "not a JSON object"));
    assert_eq!(bad(&rows[5]).0, 7);
    assert_eq!(rows.len(), 6);
}

fn reader(format: Format, text: &str) -> Result<RowReader, FileError> {
    let input: Box<dyn Read + Send> = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
    RowReader::new(input, format, Arc::default())
}

fn tenant(id: &str) -> Tenant {
    Tenant::parse(id).unwrap()
}

/// The `tenant_id` cell names the row's tenant, checked first; the empty
/// cell, or none, is the default tenant.
#[test]
fn each_row_is_its_tenant_id_cells_and_a_bad_one_is_named() {
    let rows = read_all(
        Format::Csv,
        "tenant_id,merchant_id,customer_id,payment_method,payment_method_type,connector,outcome\n\
         ,m1,c1,card,credit,stripe,success\n\
         acme,m1,c1,card,credit,stripe,success\n\
         \" Acme \",m1,c1,card,credit,stripe,success\n\
         a.b,m1,c1,card,credit,stripe,success\n\
         a.b,m1,,card,credit,stripe,success\n",
    );
    let tenants: Vec<Tenant> = rows[..3]
        .iter()
        .map(|row| good(row).command.tenant.clone())
        .collect();
    assert_eq!(tenants, [Tenant::DEFAULT, tenant("acme"), tenant("Acme")]);
    // The tenant before the body's fields, as the header before the call.
    for (row, line) in rows[3..].iter().zip([5, 6]) {
        let (got, reason) = bad(row);
        assert_eq!(got, line);
        assert!(reason.starts_with("tenant_id: may hold only"), "{reason}");
    }
    let rows = read_all(
        Format::Jsonl,
        "{\"tenant_id\":\"acme\",\"merchant_id\":\"m\",\"customer_id\":\"c\",\"payment_method\":\"card\",\"payment_method_type\":\"debit\",\"connector\":\"adyen\",\"outcome\":\"success\"}\n\
         {\"tenant_id\":null,\"merchant_id\":\"m\",\"customer_id\":\"c\",\"payment_method\":\"card\",\"payment_method_type\":\"debit\",\"connector\":\"adyen\",\"outcome\":\"success\"}\n\
         {\"tenant_id\":7,\"merchant_id\":\"m\",\"customer_id\":\"c\",\"payment_method\":\"card\",\"payment_method_type\":\"debit\",\"connector\":\"adyen\",\"outcome\":\"success\"}\n",
    );
    assert_eq!(good(&rows[0]).command.tenant, tenant("acme"));
    assert!(good(&rows[1]).command.tenant.is_default());
    assert_eq!(bad(&rows[2]), (3, "tenant_id: must be a string"));
}

/// `--tenant`: every row is its tenant's, and rows that name their own
/// stop the file: a CSV at its header, JSON Lines at the first such line.
#[test]
fn a_tenant_for_every_row_refuses_rows_that_name_theirs() {
    let plain = "merchant_id,customer_id,payment_method,payment_method_type,connector,outcome\n\
                 m1,c1,card,credit,stripe,success\n";
    let mut rows = reader(Format::Csv, plain)
        .unwrap()
        .for_tenant(tenant("acme"))
        .unwrap();
    let Some(Ok(Parsed::Row(row))) = rows.next_row() else {
        panic!("a row");
    };
    assert_eq!(row.command.tenant, tenant("acme"));

    let with_column = format!("tenant_id,{plain}");
    let csv = reader(Format::Csv, &with_column).unwrap();
    assert_eq!(csv.has_tenant_column(), Some(true));
    let error = csv.for_tenant(tenant("acme")).err().unwrap();
    assert!(matches!(error, FileError::TenantColumn { line: None }));
    assert!(
        error
            .to_string()
            .starts_with("the rows have a `tenant_id` column")
    );

    let lines = "{\"merchant_id\":\"m\",\"customer_id\":\"c\",\"payment_method\":\"card\",\"payment_method_type\":\"debit\",\"connector\":\"adyen\",\"outcome\":\"success\"}\n\
                 {\"tenant_id\":\"\",\"merchant_id\":\"m\",\"customer_id\":\"c\",\"payment_method\":\"card\",\"payment_method_type\":\"debit\",\"connector\":\"adyen\",\"outcome\":\"success\"}\n";
    let jsonl = reader(Format::Jsonl, lines).unwrap();
    assert_eq!(jsonl.has_tenant_column(), None);
    let mut jsonl = jsonl.for_tenant(Tenant::DEFAULT).unwrap();
    assert!(matches!(jsonl.next_row(), Some(Ok(Parsed::Row(_)))));
    let Some(Err(error)) = jsonl.next_row() else {
        panic!("the second line names its tenant");
    };
    assert!(
        error
            .to_string()
            .starts_with("line 2: the rows have a `tenant_id` column"),
        "{error}"
    );
}

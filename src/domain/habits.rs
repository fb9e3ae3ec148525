//! GetHabits: every stored combo of a customer, highest count first, then in
//! bytewise field order.

use super::combo::split_field;

/// One stored combo and its net count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Habit {
    pub method: String,
    pub method_type: String,
    pub connector: String,
    pub net_count: i64,
}

/// Turns a customer hash into ordered habits. A field this service could not
/// have written (no two colons) is skipped rather than failing the read.
pub fn ordered_habits(fields: &[(String, i64)]) -> Vec<Habit> {
    let mut sorted: Vec<&(String, i64)> = fields.iter().collect();
    sorted.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then_with(|| a.0.as_bytes().cmp(b.0.as_bytes()))
    });
    sorted
        .into_iter()
        .filter_map(|(field, net_count)| {
            let parts = split_field(field)?;
            Some(Habit {
                method: parts.method.to_owned(),
                method_type: parts.method_type.to_owned(),
                connector: parts.connector.to_owned(),
                net_count: *net_count,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn habits_are_ordered_by_count_then_field() {
        let fields: Vec<(String, i64)> = [
            ("CARD:DEBIT:b", 2),
            ("INTERAC:RTP:x", 5),
            ("CARD:DEBIT:a", 2),
            ("junk", 9),
        ]
        .iter()
        .map(|(f, c)| (f.to_string(), *c))
        .collect();
        let habits = ordered_habits(&fields);
        let order: Vec<(&str, &str, i64)> = habits
            .iter()
            .map(|h| (h.method.as_str(), h.connector.as_str(), h.net_count))
            .collect();
        assert_eq!(
            order,
            [("INTERAC", "x", 5), ("CARD", "a", 2), ("CARD", "b", 2)]
        );
    }
}

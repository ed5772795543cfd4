//! Key prefixes at the length bound: the longest accepted is
//! [`KEY_PREFIX_LEN_MAX`] characters, one more is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use booking::SaleId;
use booking_redis::keys::{KEY_PREFIX_LEN_MAX, KeyPrefix, sale_key};

#[test]
fn a_prefix_of_the_longest_length_is_accepted_and_one_more_is_refused() {
    let longest = "p".repeat(KEY_PREFIX_LEN_MAX);
    let prefix = KeyPrefix::parse(&longest).unwrap();
    assert_eq!(prefix.as_str(), longest);
    assert_eq!(
        sale_key(&prefix, &SaleId::parse("launch").unwrap(), "open"),
        format!("{longest}:{{sale:launch}}:open")
    );

    let too_long = format!("{longest}p");
    let refused = KeyPrefix::parse(&too_long).unwrap_err();
    assert_eq!(refused.prefix, too_long);
}

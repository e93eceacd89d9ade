//! Arrow columns → record bytes (the converter's encoder).

//! cargo-fuzz target; the body lives in `spark_topic_router_core::fuzzing::deltas_agree`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    spark_topic_router_core::fuzzing::deltas_agree(data);
});

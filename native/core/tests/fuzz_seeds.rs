//! The `from_bytes` fuzz target's hand-made seeds (`native/fuzz/seeds/from_bytes/`) are matchers of this
//! build's frozen format. libFuzzer cannot reach a new layout's checks from seeds of an old one: after the
//! format 1 -> 2 change, a 30-minute run on the old seeds covered a quarter of the edges, nearly all of them
//! the header's refusal. A format change must bring new seeds (regenerate them from the matchers this test
//! names), and this test fails until it does.

use std::path::Path;

use spark_topic_router_core::codec;

#[test]
fn every_from_bytes_seed_decodes_with_this_format() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/from_bytes");
    let mut names: Vec<String> = std::fs::read_dir(&seeds)
        .expect("the seeds directory")
        .map(|entry| entry.expect("an entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // The empty matcher, a small one with wildcards, one of every word shape, and a delta (hidden pairs, a base).
    assert_eq!(names, ["delta.bin", "empty.bin", "mixed.bin", "small.bin"]);
    for name in &names {
        let bytes = std::fs::read(seeds.join(name)).expect("a seed");
        assert!(bytes.len() <= 1024, "{name} is longer than make fuzz's -max_len");
        let matcher = codec::decode(&bytes).unwrap_or_else(|error| panic!("{name} does not decode: {error}"));
        assert_eq!(codec::encode(&matcher), bytes, "{name} is not what this build writes");
    }
    let delta = std::fs::read(seeds.join("delta.bin")).expect("a seed");
    assert_ne!(
        codec::header(&delta).expect("a header").base,
        0,
        "delta.bin is a delta over a base"
    );
}

use super::*;
use proptest::prelude::*;

fn effect_strategy() -> impl Strategy<Value = (AppendEffect, Vec<u8>)> {
    (
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), 0..64),
        any::<u64>(),
        any::<bool>(),
        proptest::option::of(("[a-z]{0,8}", any::<u64>(), any::<u64>())),
        proptest::option::of(".{0,8}"),
    )
        .prop_map(|(start, payload, at, close, producer, stream_seq)| {
            let effect = AppendEffect {
                start,
                len: payload.len() as u64,
                close,
                producer: producer.map(|(id, epoch, seq)| ProducerClaim { id, epoch, seq }),
                stream_seq,
                at,
            };
            (effect, payload)
        })
}

fn record_strategy() -> impl Strategy<Value = Record> {
    prop_oneof![
        (any::<u64>(), effect_strategy()).prop_map(|(id, (effect, p))| Record::Append {
            id,
            effect,
            payload: p.into()
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(id, at)| Record::Delete { id, at }),
        (any::<u64>(), any::<u64>()).prop_map(|(id, through)| Record::Sealed { id, through }),
        (any::<u64>(), any::<u64>()).prop_map(|(id, offset)| Record::Retain { id, offset }),
        (any::<u64>(), any::<bool>()).prop_map(|(id, public)| Record::Visibility { id, public }),
        any::<u64>().prop_map(|next| Record::FeedFrom { next }),
        (
            any::<u64>(),
            any::<u64>(),
            "[a-z0-9-]{0,16}",
            0u8..4,
            proptest::option::of(any::<u64>())
        )
            .prop_map(|(seq, stream, incarnation, tag, retained)| {
                Record::Feed(shared::invalidation::Invalidation {
                    seq,
                    stream,
                    incarnation,
                    change: change_of(tag).unwrap(),
                    retained,
                })
            }),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            "[0-9a-f]{64}",
            "[a-z/]{1,20}"
        )
            .prop_map(|(id, offset, len, digest, content_type)| Record::Snapshot {
                id,
                meta: SnapshotMeta {
                    offset,
                    len,
                    digest,
                    content_type
                }
            }),
        (
            any::<u64>(),
            "/[a-z/]{0,20}",
            "[a-z0-9]{0,16}",
            "[a-z/]{1,20}",
            0u8..3,
            any::<u64>(),
            any::<bool>(),
            effect_strategy(),
            proptest::option::of(any::<(u64, u64, u64, u64)>())
        )
            .prop_map(
                |(id, path, incarnation, ct, tag, v, public, (initial, p), fork)| {
                    let expiry = match tag {
                        0 => Expiry::Never,
                        1 => Expiry::IdleSecs(v),
                        _ => Expiry::At(v),
                    };
                    let config = StreamConfig {
                        content_type: ct.into(),
                        expiry: if tag == 0 { Expiry::Never } else { expiry },
                        public,
                    };
                    Record::Create(
                        CreateRecord {
                            id,
                            created_at: v,
                            path,
                            incarnation,
                            config,
                            initial,
                            fork: fork.map(|(source, at, anchor, sub)| ForkOf {
                                source,
                                at,
                                anchor,
                                sub,
                                restored: None,
                            }),
                        },
                        p.into(),
                    )
                }
            ),
        (
            crate::store::checkpoint::codec::strategies::saved_stream(),
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(saved, next_id, p)| Record::Image {
                saved: Box::new(saved),
                next_id,
                payload: p.into()
            }),
        (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..64)).prop_map(|(id, p)| {
            Record::ImageMore {
                id,
                payload: p.into(),
            }
        }),
        (
            any::<u64>(),
            crate::store::checkpoint::codec::strategies::saved_stream()
        )
            .prop_map(|(previous, saved)| Record::Restore {
                previous,
                saved: Box::new(saved),
            }),
    ]
}

/// Found by the fuzzer: a `Never` expiry with a value decoded, and
/// re-encoded without it. Every field has one encoding now.
#[test]
fn a_field_in_another_encoding_is_refused() {
    let create = |expiry_value: u8, public: u8| {
        let rec = Record::Create(
            CreateRecord {
                id: 1,
                created_at: 2,
                path: "/a".into(),
                incarnation: "i".into(),
                config: StreamConfig {
                    content_type: "text/plain".into(),
                    expiry: Expiry::Never,
                    public: false,
                },
                initial: AppendEffect {
                    start: 0,
                    len: 0,
                    close: false,
                    producer: None,
                    stream_seq: None,
                    at: 3,
                },
                fork: None,
            },
            Bytes::new(),
        );
        let mut buf = Vec::new();
        encode(&rec, &mut buf);
        // version, kind, id, created_at, path, incarnation, type, tag.
        let tag_at = 8 + 2 + 8 + 8 + (4 + 2) + (4 + 1) + (4 + 10);
        buf[tag_at + 1] = expiry_value;
        buf[tag_at + 9] = public;
        let crc = crc32fast::hash(&buf[8..]);
        buf[4..8].copy_from_slice(&crc.to_le_bytes());
        decode(&buf)
    };
    assert!(matches!(create(0, 0), Ok(Some(_))));
    assert_eq!(create(43, 0), Err(FrameError::Malformed("unknown expiry")));
    assert_eq!(
        create(0, 2),
        Err(FrameError::Malformed("a flag other than 0 or 1"))
    );
}

proptest! {
    #[test]
    fn round_trips(records in proptest::collection::vec(record_strategy(), 1..8)) {
        let mut buf = Vec::new();
        for r in &records {
            encode(r, &mut buf);
        }
        let mut at = 0;
        for r in &records {
            let (got, used) = decode(&buf[at..]).unwrap().unwrap();
            prop_assert_eq!(&got, r);
            at += used;
        }
        prop_assert_eq!(decode(&buf[at..]), Ok(None));
    }

    #[test]
    fn a_cut_frame_is_never_read(record in record_strategy(), cut in any::<prop::sample::Index>()) {
        let mut buf = Vec::new();
        encode(&record, &mut buf);
        let cut = 1 + cut.index(buf.len() - 1);
        let result = decode(&buf[..cut]);
        prop_assert!(result.is_err(), "a prefix of {} of {} bytes decoded", cut, buf.len());
    }

    #[test]
    fn a_flipped_byte_is_caught(record in record_strategy(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut buf = Vec::new();
        encode(&record, &mut buf);
        let i = at.index(buf.len());
        buf[i] ^= 1 << bit;
        if let Ok(Some((got, _))) = decode(&buf) {
            prop_assert!(false, "corrupt frame decoded as {:?}", got);
        }
    }
}

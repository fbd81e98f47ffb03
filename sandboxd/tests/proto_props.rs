//! Structure-aware property tests of the sandboxd protocol: valid frames round-trip through the
//! decoder however the stream is split, and mutated streams (truncations, huge lengths, unknown
//! kinds, flipped bytes, reordering) end in a typed error or a frame, never a panic, a hang or
//! memory beyond what was fed in.
//!
//! CI runs the default case count; `scripts/fuzz-proto` runs millions
//! (`PROPTEST_CASES=10000000`).

use proptest::collection::vec;
use proptest::prelude::*;
use sandboxd::proto::{
    Decoder, Entry, Failure, FileType, Frame, HEADER_LEN, Kind, MAX_BODY, Message, ProtoError, Spawn, Status,
    StdinMode, Stream,
};

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..max)
}

fn pairs() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>)>> {
    vec((bytes(12), bytes(24)), 0..4)
}

fn file_type() -> impl Strategy<Value = FileType> {
    prop_oneof![Just(FileType::File), Just(FileType::Dir), Just(FileType::Symlink), Just(FileType::Other)]
}

fn failure() -> impl Strategy<Value = Failure> {
    prop_oneof![
        Just(Failure::NotFound),
        Just(Failure::PermissionDenied),
        Just(Failure::IsADirectory),
        Just(Failure::InvalidInput),
        Just(Failure::TooLarge),
        Just(Failure::Io),
        Just(Failure::Exposed),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    let spawn = (
        vec(bytes(16), 0..5),
        pairs(),
        pairs(),
        proptest::option::of(bytes(16)),
        prop_oneof![Just(StdinMode::Null), Just(StdinMode::Pipe)],
        proptest::option::of((any::<u32>(), any::<u32>())),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(argv, env, secrets, cwd, stdin, user, control, undumpable)| {
            Message::Spawn(Spawn { argv, env, secrets, cwd, stdin, user, control, undumpable })
        });
    let requests = prop_oneof![
        (any::<u16>(), proptest::option::of((any::<u32>(), any::<u32>())))
            .prop_map(|(version, user)| Message::Hello { version, user }),
        spawn,
        bytes(64).prop_map(|data| Message::Stdin { data }),
        bytes(64).prop_map(|data| Message::ControlIn { data }),
        Just(Message::StdinEof),
        any::<i32>().prop_map(|signal| Message::Signal { signal }),
        any::<u32>().prop_map(|bytes| Message::Credit { bytes }),
        any::<u64>().prop_map(|nonce| Message::Ping { nonce }),
        Just(Message::Detach),
        (bytes(16), any::<u64>()).prop_map(|(path, limit)| Message::FsRead { path, limit }),
        (bytes(16), any::<u32>()).prop_map(|(path, mode)| Message::FsWrite { path, mode }),
        bytes(64).prop_map(|data| Message::FsData { data }),
        Just(Message::FsEnd),
        bytes(16).prop_map(|path| Message::FsList { path }),
        (bytes(16), any::<bool>()).prop_map(|(path, parents)| Message::FsMkdir { path, parents }),
        (bytes(16), any::<bool>()).prop_map(|(path, recursive)| Message::FsRemove { path, recursive }),
        bytes(16).prop_map(|path| Message::FsStat { path }),
        (bytes(16), any::<u64>()).prop_map(|(path, limit)| Message::FsOpenRead { path, limit }),
        (bytes(16), any::<u32>()).prop_map(|(path, mode)| Message::FsOpenWrite { path, mode }),
    ];
    let status = prop_oneof![any::<i32>().prop_map(Status::Code), any::<i32>().prop_map(Status::Signal)];
    let replies =
        prop_oneof![
            (any::<u16>(), any::<u32>()).prop_map(|(version, pid)| Message::HelloAck { version, pid }),
            any::<u32>().prop_map(|pid| Message::Spawned { pid }),
            (prop_oneof![Just(Stream::Stdout), Just(Stream::Stderr), Just(Stream::Control)], bytes(64))
                .prop_map(|(stream, data)| Message::Output { stream, data }),
            (status, any::<bool>()).prop_map(|(status, oom_killed)| Message::Exit { status, oom_killed }),
            (failure(), bytes(32)).prop_map(|(failure, message)| Message::Failed { failure, message }),
            any::<u64>().prop_map(|nonce| Message::Pong { nonce }),
            Just(Message::Detached),
            bytes(64).prop_map(|data| Message::FsChunk { data }),
            Just(Message::FsDone),
            (any::<u64>(), any::<bool>()).prop_map(|(size, passed)| Message::FsHandle { size, passed }),
            vec(
                (bytes(12), file_type(), any::<u64>(), any::<u32>())
                    .prop_map(|(name, file_type, size, mode)| Entry { name, file_type, size, mode }),
                0..4
            )
            .prop_map(|entries| Message::FsEntries { entries }),
            (file_type(), any::<u64>(), any::<u32>())
                .prop_map(|(file_type, size, mode)| Message::FsStatReply { file_type, size, mode }),
        ];
    prop_oneof![requests, replies]
}

fn frame() -> impl Strategy<Value = Frame> {
    (any::<u32>(), message()).prop_map(|(id, message)| Frame::new(id, message))
}

/// Feeds `stream` to a decoder in pieces of the given sizes (cycled), collecting frames until
/// the input is used up or an error ends the session. Checks on the way that the decoder
/// never holds more than one frame's bytes plus the piece just pushed.
fn decode_all(stream: &[u8], pieces: &[usize]) -> (Vec<Frame>, Option<ProtoError>) {
    let mut d = Decoder::new();
    let mut frames = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < stream.len() {
        let n = pieces[i % pieces.len()].clamp(1, stream.len() - at);
        i += 1;
        d.push(&stream[at..at + n]);
        at += n;
        assert!(d.buffered() <= at, "the decoder holds more than it was given");
        loop {
            match d.next_frame() {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(e) => {
                    assert_eq!(d.next_frame(), Err(e.clone()), "an error must end the session");
                    assert_eq!(d.buffered(), 0, "a failed decoder keeps no bytes");
                    return (frames, Some(e));
                }
            }
        }
        assert!(d.buffered() < HEADER_LEN + MAX_BODY as usize, "more than one frame is buffered");
    }
    (frames, None)
}

proptest! {
    #[test]
    fn frames_round_trip_however_the_stream_is_split(
        frames in vec(frame(), 1..6),
        pieces in vec(1usize..40, 1..8),
    ) {
        let mut stream = Vec::new();
        for f in &frames {
            f.encode(&mut stream).unwrap();
        }
        let (decoded, error) = decode_all(&stream, &pieces);
        prop_assert_eq!(error, None);
        prop_assert_eq!(decoded, frames);
    }

    #[test]
    fn a_truncated_frame_is_never_delivered(f in frame(), cut in any::<prop::sample::Index>()) {
        let stream = f.to_bytes().unwrap();
        let keep = cut.index(stream.len());
        let (decoded, error) = decode_all(&stream[..keep], &[7]);
        prop_assert!(decoded.is_empty());
        prop_assert_eq!(error, None);
    }

    #[test]
    fn mutated_streams_end_in_frames_or_a_typed_error(
        frames in vec(frame(), 1..4),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        swap in any::<bool>(),
        junk in bytes(32),
        pieces in vec(1usize..64, 1..4),
    ) {
        let mut parts: Vec<Vec<u8>> = frames.iter().map(|f| f.to_bytes().unwrap()).collect();
        if swap && parts.len() > 1 {
            parts.swap(0, 1);
        }
        let mut stream: Vec<u8> = parts.concat();
        stream.extend_from_slice(&junk);
        for (at, byte) in flips {
            let i = at.index(stream.len());
            stream[i] ^= byte;
        }
        // Whatever comes out must re-encode to valid bytes: a decoded frame is a real frame.
        let (decoded, _error) = decode_all(&stream, &pieces);
        for f in decoded {
            let again = f.to_bytes().unwrap();
            let (back, error) = decode_all(&again, &[again.len()]);
            prop_assert_eq!(error, None);
            prop_assert_eq!(back, vec![f]);
        }
    }

    #[test]
    fn a_lying_length_or_count_reserves_nothing(kind in any::<u8>(), id in any::<u32>(), len in any::<u32>()) {
        // A header, then a body that claims a huge list or field: the decoder must refuse by
        // size, never wait for 4 GiB or reserve it.
        let body = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        let mut stream = len.min(8).to_be_bytes().to_vec();
        stream.push(kind);
        stream.extend_from_slice(&id.to_be_bytes());
        stream.extend_from_slice(&body[..len.min(8) as usize]);
        let (_decoded, _error) = decode_all(&stream, &[3]);
        let mut huge = len.max(MAX_BODY + 1).to_be_bytes().to_vec();
        huge.push(kind);
        huge.extend_from_slice(&id.to_be_bytes());
        let (decoded, error) = decode_all(&huge, &[HEADER_LEN]);
        prop_assert!(decoded.is_empty());
        prop_assert_eq!(error, Some(ProtoError::TooLarge { len: len.max(MAX_BODY + 1) }));
    }
}

#[test]
fn exact_bytes_of_a_spawn() {
    let f = Frame::new(
        7,
        Message::Spawn(Spawn {
            argv: vec![b"sh".to_vec(), b"-c".to_vec()],
            env: vec![(b"A".to_vec(), b"1".to_vec())],
            secrets: vec![],
            cwd: Some(b"/w".to_vec()),
            stdin: StdinMode::Pipe,
            user: Some((1000, 1001)),
            control: true,
            undumpable: true,
        }),
    );
    let expected: Vec<u8> = [
        &[0, 0, 0, 53][..],                                            // body length
        &[Kind::Spawn.byte()],                                         // kind
        &[0, 0, 0, 7],                                                 // id
        &[0, 0, 0, 2, 0, 0, 0, 2, b's', b'h', 0, 0, 0, 2, b'-', b'c'], // argv
        &[0, 0, 0, 1, 0, 0, 0, 1, b'A', 0, 0, 0, 1, b'1'],             // env
        &[0, 0, 0, 0],                                                 // secrets
        &[1, 0, 0, 0, 2, b'/', b'w'],                                  // cwd
        &[1],                                                          // stdin: pipe
        &[1, 0, 0, 0x03, 0xe8, 0, 0, 0x03, 0xe9],                      // user 1000:1001
        &[1],                                                          // control channel
        &[1],                                                          // undumpable
    ]
    .concat();
    assert_eq!(f.to_bytes().unwrap(), expected);
}

#[test]
fn detach_and_detached_are_empty_frames_and_refuse_a_body() {
    for (message, kind) in [(Message::Detach, 0x09), (Message::Detached, 0x89)] {
        let bytes = Frame::new(0, message.clone()).to_bytes().unwrap();
        assert_eq!(bytes, [0, 0, 0, 0, kind, 0, 0, 0, 0]);
        assert_eq!(decode_all(&bytes, &[1]), (vec![Frame::new(0, message.clone())], None));
        let (_, error) = decode_all(&[0, 0, 0, 1, kind, 0, 0, 0, 0, 7], &[10]);
        assert_eq!(error, Some(ProtoError::Trailing { kind: message.kind(), extra: 1 }));
    }
}

#[test]
fn a_count_larger_than_the_body_is_truncated_not_reserved() {
    // An FsEntries body claiming 2^32-1 entries in 4 bytes.
    let mut stream = vec![0, 0, 0, 4, Kind::FsEntries.byte(), 0, 0, 0, 1];
    stream.extend_from_slice(&[0xff; 4]);
    let (decoded, error) = decode_all(&stream, &[stream.len()]);
    assert!(decoded.is_empty());
    assert_eq!(error, Some(ProtoError::Truncated { kind: Kind::FsEntries }));
}

#[test]
fn unknown_kinds_and_trailing_bytes_are_refused() {
    let (_, error) = decode_all(&[0, 0, 0, 0, 0x7f, 0, 0, 0, 0], &[9]);
    assert_eq!(error, Some(ProtoError::UnknownKind(0x7f)));
    let (_, error) = decode_all(&[0, 0, 0, 1, Kind::StdinEof.byte(), 0, 0, 0, 0, 9], &[10]);
    assert_eq!(error, Some(ProtoError::Trailing { kind: Kind::StdinEof, extra: 1 }));
    let (_, error) = decode_all(&[0, 0, 0, 1, Kind::FsMkdir.byte(), 0, 0, 0, 0, 9], &[10]);
    assert_eq!(error, Some(ProtoError::Truncated { kind: Kind::FsMkdir }));
}

#[test]
fn an_oversized_frame_is_not_encoded() {
    let data = vec![0; MAX_BODY as usize];
    let mut out = vec![1, 2, 3];
    let error = Frame::new(1, Message::Stdin { data }).encode(&mut out).unwrap_err();
    assert_eq!(error, ProtoError::TooLarge { len: MAX_BODY + 4 });
    assert_eq!(out, [1, 2, 3], "nothing is appended on failure");
}

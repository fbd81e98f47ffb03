//! Writing a message's fields into a frame body, in the order `decode.rs` reads them.

use super::{Failure, FileType, Message, Status, StdinMode, Stream};

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // A field longer than u32::MAX cannot fit a frame: the frame's total check refuses it.
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn put_count(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes());
}

fn put_pairs(out: &mut Vec<u8>, pairs: &[(Vec<u8>, Vec<u8>)]) {
    put_count(out, pairs.len());
    for (k, v) in pairs {
        put_bytes(out, k);
        put_bytes(out, v);
    }
}

fn put_user(out: &mut Vec<u8>, user: Option<(u32, u32)>) {
    match user {
        None => out.push(0),
        Some((uid, gid)) => {
            out.push(1);
            out.extend_from_slice(&uid.to_be_bytes());
            out.extend_from_slice(&gid.to_be_bytes());
        }
    }
}

fn file_type_byte(t: FileType) -> u8 {
    match t {
        FileType::File => 0,
        FileType::Dir => 1,
        FileType::Symlink => 2,
        FileType::Other => 3,
    }
}

fn failure_byte(f: Failure) -> u8 {
    match f {
        Failure::NotFound => 0,
        Failure::PermissionDenied => 1,
        Failure::IsADirectory => 2,
        Failure::InvalidInput => 3,
        Failure::TooLarge => 4,
        Failure::Io => 5,
        Failure::Exposed => 6,
    }
}

pub(super) fn body(message: &Message, out: &mut Vec<u8>) {
    match message {
        Message::Hello { version, user } => {
            out.extend_from_slice(&version.to_be_bytes());
            put_user(out, *user);
        }
        Message::Spawn(s) => {
            put_count(out, s.argv.len());
            for arg in &s.argv {
                put_bytes(out, arg);
            }
            put_pairs(out, &s.env);
            put_pairs(out, &s.secrets);
            match &s.cwd {
                None => out.push(0),
                Some(cwd) => {
                    out.push(1);
                    put_bytes(out, cwd);
                }
            }
            out.push(match s.stdin {
                StdinMode::Null => 0,
                StdinMode::Pipe => 1,
            });
            put_user(out, s.user);
            out.push(u8::from(s.control));
            out.push(u8::from(s.undumpable));
        }
        Message::Stdin { data }
        | Message::ControlIn { data }
        | Message::FsData { data }
        | Message::FsChunk { data } => {
            put_bytes(out, data);
        }
        Message::StdinEof | Message::FsEnd | Message::FsDone | Message::Detach | Message::Detached => {}
        Message::Signal { signal } => out.extend_from_slice(&signal.to_be_bytes()),
        Message::Credit { bytes } => out.extend_from_slice(&bytes.to_be_bytes()),
        Message::FsHandle { size, passed } => {
            out.extend_from_slice(&size.to_be_bytes());
            out.push(u8::from(*passed));
        }
        Message::Ping { nonce } | Message::Pong { nonce } => out.extend_from_slice(&nonce.to_be_bytes()),
        Message::FsRead { path, limit } | Message::FsOpenRead { path, limit } => {
            put_bytes(out, path);
            out.extend_from_slice(&limit.to_be_bytes());
        }
        Message::FsWrite { path, mode } | Message::FsOpenWrite { path, mode } => {
            put_bytes(out, path);
            out.extend_from_slice(&mode.to_be_bytes());
        }
        Message::FsList { path } | Message::FsStat { path } => put_bytes(out, path),
        Message::FsMkdir { path, parents: flag } | Message::FsRemove { path, recursive: flag } => {
            put_bytes(out, path);
            out.push(u8::from(*flag));
        }
        Message::HelloAck { version, pid } => {
            out.extend_from_slice(&version.to_be_bytes());
            out.extend_from_slice(&pid.to_be_bytes());
        }
        Message::Spawned { pid } => out.extend_from_slice(&pid.to_be_bytes()),
        Message::Output { stream, data } => {
            out.push(match stream {
                Stream::Stdout => 1,
                Stream::Stderr => 2,
                Stream::Control => 3,
            });
            put_bytes(out, data);
        }
        Message::Exit { status, oom_killed } => {
            let (tag, value) = match status {
                Status::Code(c) => (0, c),
                Status::Signal(s) => (1, s),
            };
            out.push(tag);
            out.extend_from_slice(&value.to_be_bytes());
            out.push(u8::from(*oom_killed));
        }
        Message::Failed { failure, message } => {
            out.push(failure_byte(*failure));
            put_bytes(out, message);
        }
        Message::FsEntries { entries } => {
            put_count(out, entries.len());
            for e in entries {
                put_bytes(out, &e.name);
                out.push(file_type_byte(e.file_type));
                out.extend_from_slice(&e.size.to_be_bytes());
                out.extend_from_slice(&e.mode.to_be_bytes());
            }
        }
        Message::FsStatReply { file_type, size, mode } => {
            out.push(file_type_byte(*file_type));
            out.extend_from_slice(&size.to_be_bytes());
            out.extend_from_slice(&mode.to_be_bytes());
        }
    }
}

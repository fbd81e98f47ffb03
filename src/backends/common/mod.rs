//! What the backends whose client libraries need tokio (`docker://`, `e2b://`, `modal://`)
//! share: a private runtime each ([`portal`]) and the consumer's half of a streamed command
//! whose output a pump task reads on it ([`pumped`]).

pub(crate) mod portal;
pub(crate) mod pumped;

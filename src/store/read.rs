//! An object read from start to end as a `std::io::Read`: large ranged GETs, a few
//! ahead of the reader, each pinned to the object's ETag.

use std::collections::VecDeque;
use std::io::{self, Read};

use bytes::{Buf, Bytes};
use tokio::task::JoinHandle;

use super::{get_range, head, Listed, ObjectUrl};
use crate::error::{Error, Result};

/// Bytes per ranged GET.
pub const CHUNK_BYTES: u64 = 8 << 20;
/// GETs in flight ahead of the reader (so at most `(AHEAD + 1) × CHUNK_BYTES` held).
const AHEAD: usize = 3;

/// A sequential reader of one object.
pub struct RemoteRead {
    object: Listed,
    /// The next offset to request.
    next: u64,
    pending: VecDeque<JoinHandle<Result<Bytes>>>,
    current: Bytes,
}

impl RemoteRead {
    /// Opens `url` (one HEAD for its size and ETag).
    ///
    /// # Errors
    ///
    /// A store error naming the URL.
    pub fn open(url: &ObjectUrl) -> Result<RemoteRead> {
        Ok(RemoteRead::new(head(url)?))
    }

    /// Reads an object already listed (its size and ETag known).
    pub fn new(object: Listed) -> RemoteRead {
        let mut r = RemoteRead {
            object,
            next: 0,
            pending: VecDeque::new(),
            current: Bytes::new(),
        };
        r.fill();
        r
    }

    /// The object's size.
    pub fn len(&self) -> u64 {
        self.object.size
    }

    /// Whether the object is empty.
    pub fn is_empty(&self) -> bool {
        self.object.size == 0
    }

    fn fill(&mut self) {
        while self.pending.len() < AHEAD && self.next < self.object.size {
            let end = (self.next + CHUNK_BYTES).min(self.object.size);
            let url = self.object.url.clone();
            let etag = self.object.etag.clone();
            let range = self.next..end;
            self.pending.push_back(super::spawn(async move {
                get_range(&url, range, etag.as_deref()).await
            }));
            self.next = end;
        }
    }
}

impl Read for RemoteRead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            let Some(next) = self.pending.pop_front() else {
                return Ok(0);
            };
            let bytes = super::block_on(next)
                .map_err(|e| io::Error::other(e.to_string()))?
                .map_err(|e: Error| io::Error::other(e))?;
            self.current = bytes;
            self.fill();
        }
        let n = buf.len().min(self.current.len());
        self.current.copy_to_slice(&mut buf[..n]);
        Ok(n)
    }
}

impl Drop for RemoteRead {
    fn drop(&mut self) {
        for task in &self.pending {
            task.abort();
        }
    }
}

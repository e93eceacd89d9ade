//! A Parquet file in a store, as parquet's async reader reads it: the footer by one
//! ranged request at the end of the object, then only the byte ranges of the selected
//! column chunks, large ranges split into parallel requests, every request pinned to
//! the ETag the listing saw.

use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::future::{BoxFuture, FutureExt};
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use super::{get_range, Listed};
use crate::error::Error;

/// Bytes per request when a column chunk is fetched in pieces.
const PIECE_BYTES: u64 = 8 << 20;
/// The footer is read with one request for the last 64 KiB (most footers fit).
const FOOTER_HINT: usize = 64 << 10;

/// One Parquet object.
#[derive(Debug, Clone)]
pub(crate) struct RemoteParquet {
    object: Listed,
}

impl RemoteParquet {
    pub(crate) fn new(object: Listed) -> RemoteParquet {
        RemoteParquet { object }
    }
}

fn external(e: Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl RemoteParquet {
    async fn fetch(&self, range: Range<u64>) -> parquet::errors::Result<Bytes> {
        let len = range.end.saturating_sub(range.start);
        if range.end > self.object.size {
            return Err(ParquetError::EOF(format!(
                "a read of bytes {}..{} runs past the end of the object ({} bytes)",
                range.start, range.end, self.object.size
            )));
        }
        let etag = self.object.etag.as_deref();
        if len <= PIECE_BYTES {
            return get_range(&self.object.url, range, etag)
                .await
                .map_err(external);
        }
        // A large chunk: pieces in parallel (the permits bound them), joined in order.
        let pieces = (range.start..range.end)
            .step_by(PIECE_BYTES as usize)
            .map(|start| {
                let piece = start..(start + PIECE_BYTES).min(range.end);
                get_range(&self.object.url, piece, etag)
            });
        let parts = futures_util::future::try_join_all(pieces)
            .await
            .map_err(external)?;
        let mut whole = BytesMut::with_capacity(len as usize);
        for p in parts {
            whole.extend_from_slice(&p);
        }
        Ok(whole.freeze())
    }
}

impl AsyncFileReader for RemoteParquet {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move { self.fetch(range).await }.boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            let this = &*self;
            futures_util::future::try_join_all(ranges.into_iter().map(|r| this.fetch(r))).await
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let mut reader = ParquetMetaDataReader::new().with_prefetch_hint(Some(FOOTER_HINT));
            if let Some(options) = options {
                reader = reader
                    .with_column_index_policy(options.column_index_policy())
                    .with_offset_index_policy(options.offset_index_policy())
                    .with_metadata_options(Some(options.metadata_options().clone()));
            }
            let size = self.object.size;
            let metadata = reader.load_and_finish(&mut *self, size).await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

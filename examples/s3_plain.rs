//! The plain client that `scripts/bench_s3.sh` compares tfshard with: the same bytes
//! through the same server with nothing else done. Uses `object_store`
//! directly, configured from the same environment variables.
//!
//! ```text
//! s3_plain get URL                  # GETs every object below URL, 16 ranged requests in flight
//! s3_plain put URL BYTES            # multipart PUT of BYTES bytes, 8 MiB parts, 4 in flight
//! s3_plain copy URL                 # server-side copy of every object below URL to KEY.copy
//! ```
//!
//! Prints one JSON line: `{"bytes", "seconds", "bytes_per_sec"}`.

use std::sync::Arc;
use std::time::Instant;

use futures_util::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

const RANGE: u64 = 8 << 20;
const PART: usize = 8 << 20;

fn store(url: &str) -> (Arc<dyn ObjectStore>, Path) {
    let rest = url.strip_prefix("s3://").expect("an s3:// URL");
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    let s3 = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .build()
        .expect("an S3 client from the environment");
    (Arc::new(s3), Path::from(key))
}

async fn get(url: &str) -> u64 {
    let (s3, prefix) = store(url);
    let objects: Vec<_> = s3.list(Some(&prefix)).try_collect().await.unwrap();
    let ranges: Vec<(Path, std::ops::Range<u64>)> = objects
        .iter()
        .flat_map(|o| {
            (0..o.size)
                .step_by(RANGE as usize)
                .map(move |s| (o.location.clone(), s..(s + RANGE).min(o.size)))
        })
        .collect();
    futures_util::stream::iter(ranges)
        .map(|(key, range)| {
            let s3 = s3.clone();
            async move { s3.get_range(&key, range).await.unwrap().len() as u64 }
        })
        .buffer_unordered(16)
        .fold(0u64, |a, b| async move { a + b })
        .await
}

async fn put(url: &str, bytes: u64) -> u64 {
    let (s3, key) = store(url);
    let upload = s3.put_multipart(&key).await.unwrap();
    let mut write = object_store::WriteMultipart::new_with_chunk_size(upload, PART);
    let chunk = vec![7u8; PART];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(PART as u64) as usize;
        write.wait_for_capacity(4).await.unwrap();
        write.write(&chunk[..n]);
        left -= n as u64;
    }
    write.finish().await.unwrap();
    bytes
}

async fn copy(url: &str) -> u64 {
    let (s3, prefix) = store(url);
    let objects: Vec<_> = s3.list(Some(&prefix)).try_collect().await.unwrap();
    let copies = objects.iter().map(|o| {
        let to = Path::from(format!("{}.copy", o.location));
        let s3 = s3.clone();
        async move {
            s3.copy(&o.location, &to).await.unwrap();
            s3.delete(&to).await.unwrap();
            o.size
        }
    });
    futures_util::future::join_all(copies)
        .await
        .into_iter()
        .sum()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let bytes = match args.first().map(String::as_str) {
        Some("get") => runtime.block_on(get(&args[1])),
        Some("put") => runtime.block_on(put(&args[1], args[2].parse().unwrap())),
        Some("copy") => runtime.block_on(copy(&args[1])),
        _ => {
            eprintln!("usage: s3_plain get URL | s3_plain put URL BYTES");
            std::process::exit(2);
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{{\"bytes\": {bytes}, \"seconds\": {seconds:.3}, \"bytes_per_sec\": {:.0}}}",
        bytes as f64 / seconds
    );
}

import Foundation
import CryptoKit

enum ImageCacheError: Error {
    case invalidResponse(statusCode: Int)
    case decodingFailed(URL)
}

struct CachedImage {
    let data: Data
    let storedAt: Date
    let byteCount: Int
}

final class ImageCache {
    private var memory: [String: CachedImage] = [:]
    private var accessOrder: [String] = []
    private let queue = DispatchQueue(label: "com.example.imagecache")
    private let diskDirectory: URL
    private let session: URLSession
    let memoryLimitBytes: Int
    let maxAge: TimeInterval

    init(directory: URL, session: URLSession = .shared, memoryLimitBytes: Int = 32_000_000,
         maxAge: TimeInterval = 86_400) {
        self.diskDirectory = directory
        self.session = session
        self.memoryLimitBytes = memoryLimitBytes
        self.maxAge = maxAge
    }

    var count: Int {
        return queue.sync { memory.count }
    }

    func contains(_ url: URL) -> Bool {
        let key = cacheKey(for: url)
        return queue.sync { memory[key] != nil }
    }

    private func cacheKey(for url: URL) -> String {
        let digest = SHA256.hash(data: Data(url.absoluteString.utf8))
        return digest.map { String(format: "%02x", $0) }.joined()
    }

    func store(_ data: Data, for url: URL) {
        let key = cacheKey(for: url)
        queue.sync {
            let freshEntry = CachedImage(data: data, storedAt: Date(), byteCount: data.count)
            memory[key] = freshEntry
            accessOrder.removeAll { $0 == key }
            accessOrder.append(key)
            var residentBytes = memory.values.reduce(0) { $0 + $1.byteCount }
            while residentBytes > memoryLimitBytes, let oldestKey = accessOrder.first {
                accessOrder.removeFirst()
                if let evicted = memory.removeValue(forKey: oldestKey) {
                    residentBytes -= evicted.byteCount
                }
            }
        }
        let diskTarget = diskDirectory.appendingPathComponent(key)
        do {
            try FileManager.default.createDirectory(at: diskDirectory,
                                                    withIntermediateDirectories: true)
            try data.write(to: diskTarget, options: .atomic)
        } catch {
            NSLog("ImageCache: could not persist %@: %@", key, String(describing: error))
        }
    }

    func load(_ url: URL, completion: @escaping (Result<Data, Error>) -> Void) {
        let key = cacheKey(for: url)
        let now = Date()
        if let memoryHit = queue.sync(execute: { memory[key] }),
           now.timeIntervalSince(memoryHit.storedAt) < maxAge {
            completion(.success(memoryHit.data))
            return
        }
        let onDiskPath = diskDirectory.appendingPathComponent(key)
        if let attributes = try? FileManager.default.attributesOfItem(atPath: onDiskPath.path),
           let modified = attributes[.modificationDate] as? Date,
           now.timeIntervalSince(modified) < maxAge,
           let diskBytes = try? Data(contentsOf: onDiskPath) {
            completion(.success(diskBytes))
            return
        }
        let fetchTask = session.dataTask(with: url) { [weak self] data, response, error in
            if let error = error {
                completion(.failure(error))
                return
            }
            let httpStatus = (response as? HTTPURLResponse)?.statusCode ?? 0
            guard (200..<300).contains(httpStatus), let payload = data else {
                completion(.failure(ImageCacheError.invalidResponse(statusCode: httpStatus)))
                return
            }
            self?.store(payload, for: url)
            completion(.success(payload))
        }
        fetchTask.resume()
    }
}

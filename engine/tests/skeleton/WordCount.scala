package com.example.text

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path}
import scala.collection.mutable
import scala.io.Source
import scala.util.{Try, Using}

final case class WordStat(word: String, count: Long, firstLine: Int)

sealed trait Normalization
object Normalization {
  case object Exact extends Normalization
  case object CaseInsensitive extends Normalization
}

class WordCounter(stopWords: Set[String], mode: Normalization = Normalization.CaseInsensitive) {
  private val counts = mutable.HashMap.empty[String, Long]
  private val firstSeen = mutable.HashMap.empty[String, Int]
  private var linesRead: Int = 0
  private val tokenPattern = "[\\p{L}\\p{N}']+".r

  def totalLines: Int = linesRead

  def contains(word: String): Boolean = {
    val key = normalize(word)
    counts.contains(key)
  }

  def countOf(word: String): Long = {
    counts.getOrElse(normalize(word), 0L)
  }

  private def normalize(word: String): String = mode match {
    case Normalization.Exact           => word
    case Normalization.CaseInsensitive => word.toLowerCase
  }

  def ingestFile(path: Path): Try[Int] = {
    Using(Source.fromFile(path.toFile, StandardCharsets.UTF_8.name())) { source =>
      var wordsAccepted = 0
      var skippedStopWords = 0
      for (rawLine <- source.getLines()) {
        linesRead += 1
        val strippedLine = rawLine.takeWhile(_ != '#').trim
        if (strippedLine.nonEmpty) {
          for (token <- tokenPattern.findAllIn(strippedLine)) {
            val cleanedToken = normalize(token.stripPrefix("'").stripSuffix("'"))
            if (cleanedToken.isEmpty || stopWords.contains(cleanedToken)) {
              skippedStopWords += 1
            } else {
              counts.update(cleanedToken, counts.getOrElse(cleanedToken, 0L) + 1L)
              firstSeen.getOrElseUpdate(cleanedToken, linesRead)
              wordsAccepted += 1
            }
          }
        }
      }
      if (skippedStopWords > wordsAccepted) {
        System.err.println(s"$path: more stop words ($skippedStopWords) than words ($wordsAccepted)")
      }
      wordsAccepted
    }
  }

  def topWords(limit: Int, minLength: Int = 1): Seq[WordStat] = {
    require(limit > 0, "limit must be positive")
    val eligibleEntries = counts.iterator.filter { case (word, _) => word.length >= minLength }
    val rankedStats = eligibleEntries
      .map { case (word, count) => WordStat(word, count, firstSeen.getOrElse(word, 0)) }
      .toVector
      .sortBy(stat => (-stat.count, stat.firstLine, stat.word))
    val truncatedStats = rankedStats.take(limit)
    if (truncatedStats.size < limit) {
      val shortBy = limit - truncatedStats.size
      System.err.println(s"only ${truncatedStats.size} words qualify, $shortBy short of $limit")
    }
    val widestWord = truncatedStats.map(_.word.length).foldLeft(0)(math.max)
    truncatedStats.foreach { stat =>
      val paddedWord = stat.word.padTo(widestWord, ' ')
      println(f"$paddedWord ${stat.count}%8d  (line ${stat.firstLine})")
    }
    truncatedStats
  }

  def writeReport(target: Path, limit: Int): Unit = {
    val lines = topWords(limit).map(s => s"${s.word}\t${s.count}")
    Files.write(target, lines.mkString("\n").getBytes(StandardCharsets.UTF_8))
  }
}

object WordCount {
  def main(args: Array[String]): Unit = {
    val counter = new WordCounter(Set("the", "a", "an", "and", "of"))
    args.map(Path.of(_)).foreach { path =>
      counter.ingestFile(path).failed.foreach(e => System.err.println(s"$path: ${e.getMessage}"))
    }
    counter.topWords(20)
  }
}

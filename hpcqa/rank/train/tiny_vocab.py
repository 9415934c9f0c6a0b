"""The tiny test model's WordPiece vocabulary (builtin:tiny-bert): 2000 tokens, the special ones first, then
sorted. Trained once on synth.corpus() by tokenizers' WordPieceTrainer (model.train_tiny_vocab, written by
scripts/tiny_vocab.py); training again gives its tokens other ids and, about one time in four, another vocabulary
(the trainer breaks ties in hash order), so every node that builds the model reads this list instead
(model.tiny_tokenizer). Data, not code: whitespace-separated tokens."""

TOKENS = """
[PAD] [UNK] [CLS] [SEP] [MASK] ##0 ##00 ##01 ##02 ##03 ##04 ##05 ##06 ##07 ##08 ##09 ##1 ##10
##11 ##12 ##13 ##14 ##15 ##16 ##17 ##18 ##19 ##2 ##20 ##21 ##22 ##23 ##24 ##25 ##26 ##27 ##28
##29 ##3 ##30 ##31 ##32 ##33 ##34 ##35 ##36 ##37 ##38 ##39 ##4 ##40 ##41 ##42 ##43 ##44 ##45
##46 ##47 ##48 ##49 ##5 ##50 ##51 ##52 ##53 ##54 ##55 ##56 ##57 ##58 ##59 ##6 ##60 ##61 ##62
##63 ##64 ##65 ##66 ##67 ##68 ##69 ##7 ##70 ##71 ##72 ##73 ##74 ##75 ##76 ##77 ##78 ##79 ##8
##80 ##81 ##82 ##83 ##84 ##85 ##86 ##87 ##88 ##89 ##9 ##90 ##92 ##93 ##94 ##95 ##96 ##97 ##98
##99 ##a ##ads ##ain ##al ##an ##ange ##anor ##ap ##apel ##ar ##ara ##as ##asil ##at ##ato ##b
##bat ##bel ##beltam ##blis ##buil ##c ##cal ##ch ##ck ##cor ##d ##de ##dor ##ds ##e ##el ##en
##ena ##enros ##es ##f ##fi ##fitam ##g ##ga ##gan ##ge ##gh ##gion ##go ##h ##he ##hed ##hing
##hu ##i ##ian ##ians ##id ##il ##ill ##ilo ##in ##ing ##inor ##ion ##is ##ita ##ital ##itam
##ive ##j ##jor ##k ##ka ##kanor ##kato ##ke ##kel ##kelzen ##l ##la ##ld ##lden ##le ##lers
##lis ##lo ##lor ##loros ##losil ##lotam ##low ##ly ##m ##main ##mar ##mi ##milo ##minor ##mm
##n ##nde ##ning ##nor ##o ##on ##onor ##op ##ople ##or ##os ##osil ##ost ##ou ##oul ##ow ##own
##p ##pel ##ple ##q ##quin ##quingan ##r ##ra ##re ##ren ##renlo ##ri ##ring ##ros ##rou ##rs
##s ##sil ##t ##ta ##tablis ##tam ##te ##ters ##tion ##to ##tonor ##tor ##tosil ##tri ##ts ##tur
##u ##ue ##uil ##uin ##ul ##ula ##ur ##v ##va ##vapel ##var ##vato ##ve ##vel ##ver ##vex ##w
##wen ##wenquin ##wenva ##x ##y ##yar ##z ##zen ##zentam ##zu , . 0 000 004 009 011 013 018 021
025 027 032 034 036 040 041 043 052 053 054 058 059 060 063 068 076 079 082 083 085 088 090 092
094 095 097 1 100 101 103 104 105 107 108 109 11 110 1104 1106 1107 1108 1109 111 1112 1113 1114
1115 112 1123 1126 1129 113 1132 1135 1138 1142 115 1159 1163 1164 1165 1167 1169 1172 1175 1176
1180 1182 1184 1185 1186 1192 1193 1194 1196 12 1201 1205 121 1210 1212 1215 1216 1217 1218 122
1220 1224 1225 1226 1227 1229 123 1231 1232 1233 1234 1238 1240 1241 1245 1246 1248 1252 1254
1257 1259 126 1260 1265 1267 1271 1274 1276 1279 1286 1288 1289 1290 1296 1297 13 130 1301 1303
1314 1315 132 1325 1329 133 1333 1335 1339 134 1340 1341 1342 1344 1345 1349 135 1355 1356 1359
136 1363 1365 1373 1375 1377 1378 1380 1383 1384 1396 1398 14 140 1401 1402 1409 141 1410 1415
1419 1421 1422 1425 1426 143 1430 1433 1435 1439 1442 1443 1447 145 1450 1452 1460 1463 1466 147
1472 1474 148 1481 1482 149 1490 1491 15 150 1500 1503 1507 1508 1509 151 1514 1517 1529 1537
154 1540 1546 155 1550 1553 1556 1557 1558 1559 156 1560 1563 1564 1568 1570 1572 1573 1574 1576
1578 158 1583 159 1594 1595 1597 16 1602 1603 1605 1608 1609 161 1612 1615 162 1623 1625 1628
1629 163 1633 1634 1636 1637 1642 1647 165 1651 1652 1664 1668 167 1670 1671 1679 168 1681 1683
1684 1685 1688 1697 1698 17 170 1706 171 1712 1715 1716 1717 1719 1720 1722 1723 1724 1729 1730
1736 1738 174 1740 1741 1743 1744 175 1751 1754 1757 1764 1765 1766 1767 1769 177 1770 1771 1772
1777 1778 1784 1787 179 1791 18 180 1800 1802 1805 1807 1809 181 1814 1815 1816 1817 1821 1825
1836 184 1840 1845 1848 1849 1852 1854 1858 186 1860 1868 187 1871 1873 1877 1880 1882 1885 1886
1887 1889 189 1890 1894 1896 1897 1899 19 190 1903 1904 191 1911 1912 1919 1922 1923 1925 1926
1930 1932 1933 1936 1938 1946 195 1950 1954 1956 1958 1959 1962 1963 1965 1966 1967 197 1976 198
1980 1988 199 1990 2 202 206 207 208 210 211 212 218 220 221 222 223 225 229 231 233 235 236 239
240 244 245 246 249 252 258 259 26 261 262 263 264 265 268 27 271 275 278 281 282 283 284 286
288 289 290 292 294 297 298 3 30 300 301 303 308 309 310 311 312 317 318 321 323 324 327 329 33
331 337 339 342 345 346 347 348 352 354 358 359 36 361 362 364 37 370 372 373 374 375 376 377
379 381 384 389 39 390 391 395 4 40 402 405 406 407 408 409 410 413 415 418 419 42 420 425 427
428 431 432 434 436 437 439 444 447 45 450 451 452 455 457 46 463 467 472 473 474 476 477 478 48
481 486 496 498 499 5 500 501 503 505 506 508 511 512 513 516 517 518 519 520 521 522 523 524
525 526 527 529 53 532 537 538 539 54 540 542 543 544 546 547 55 550 551 555 556 558 559 561 563
564 565 567 57 571 584 588 592 596 6 601 603 609 610 615 617 618 620 622 624 625 633 636 637 638
64 643 645 646 648 651 652 654 655 658 659 66 660 661 664 665 67 673 679 68 681 682 683 684 688
689 69 697 7 70 700 704 708 710 711 713 714 715 717 718 72 723 726 729 73 730 731 732 736 737
739 741 742 744 745 746 75 750 756 759 761 763 765 767 769 770 777 779 782 783 785 786 787 788
79 790 793 8 80 801 802 803 804 805 808 809 810 815 819 82 820 821 822 823 824 825 826 827 83
830 834 836 842 843 844 845 846 847 849 850 851 852 853 854 855 856 859 86 862 863 866 867 868
871 872 873 877 878 88 880 882 883 886 89 892 896 897 898 899 9 901 903 904 905 906 907 908 909
91 911 912 913 914 918 921 922 923 925 927 928 929 931 932 935 937 939 94 940 941 942 943 944
946 947 949 950 951 952 953 954 955 957 959 960 961 962 963 965 966 968 973 974 975 978 981 982
983 985 99 990 995 ? a ad ada b bel belbel beldor belfi belgan belhu beljor belka belkel bello
belmar belmi belnor belpel belquin belren belros beltam belto belul belva belvex belwen belyar
belzen belzu bl bla black blue bor boris by c cap capital cen centur century cl clara co color
comm common d de debat debate dmi dmitri dor dorbel dordor dorfi dorgan dorhu dorjor dorka
dorkelzen dorlo dorloros dormar dormi dornor dorpel dorquin dorren dorros dorsil dortam dorto
dorul dorva dorvex dorwen doryar dorzen dorzu e ear early el elena es establis established f far
farid fi fibel fidor fifi figan fihu fijor fika fikel filo fimar fimi finor fiquin firen firos
fis fishing fisil fitam fito fiul fiva fiwen fiyar fizen fla flag for fou founde founded g gan
ganbel gandor ganfi gangan ganhu ganjor ganka gankel ganlo ganmar ganmi gannor ganpel ganquin
ganros gansil gantam ganto ganul ganva ganvex ganwen ganyar ganzen ganzu go golden gre green
greta h has his histor historians how hu hubel hudor hufi hugan hugo huhu hujor hukato hukel
hulo humar humi humilo hunor hupel huquin huren huros husil hutam huto huul huva huvex huwen
huwento huyar huzen huzu i in ines is its j jon jonas jor jorbel jordor jorfi jorgan jorhu
jorjor jorka jorkel jorlo jormar jorminor jornor jorpel jorquin jorren jorros jorsil jortam
jorto jorul jorva jorwen joryar jorzen jorzu k ka kabel kagan kahu kajor kakanor kakel kalo
kamar kami kanor kapel kaquin kar karen karos kasil katam kato kaul kava kawen kayar kazen kazu
kel keldor kelfi kelgan kelhu keljor kelka kelkel kello kelmar kelmi kelnor kelpel kelquin
kelren kelros kelsil keltam kelto kelul kelva kelvex kelwen kelyar kelzen kelzu ki kira kn known
l lar lars las last live lo lobel local lodor lofi lofitam logan lohu lojor loka lokel lolotam
lomar lomi lonor lop lopel loquin lor loren loros losil lotam loto lotosil loul lova lovex lowen
loyar lozen lozu m main man many mar marbel mardor marfi margan margangan marhu marjor marka
marke markel markets marlo marmar marmi marnor marpel marquin marren marros marsil martam marto
marul marvar marvex marwen maryar marzen marzu mi mibel midor mifi migan mihu mijor mika mikel
mil mild milo mimar mimi minor mipel miquin miren miros mis misil mitam mito miul miva mivapel
mive mivex miwen miyar mizen mizu mon mona mor morning most mostly n nil nils nor norbeltam
nordor norfi norgan norhu norjor norka norkel norlo normar normarul normi nornor norpel norquin
norrenlo norros nortam norto norul norva norvex norwen noryar norzen norzu o of ol old olga op
open or orange p pa pas pass pavel pe pel pelbel peldor pelfi pelgan pelhu peljor pelka pelkel
pello pelmar pelmi pelnor pelpel pelquin pelren pelros pelsil peltam pelto pelul pelva pelvex
pelwen pelyar pelzen pelzu people pop popula population pur purple q quin quinbel quindor quinfi
quingan quinhu quinjor quinka quinkel quinlo quinmar quinmi quinnor quinpel quinquin quinren
quinros quinsil quintam quinto quinul quinva quinvex quinwen quinyar quinzen quinzu r re rebuil
rebuilt recor records red region remain remains ren renbel rendor renfi rengan renhu renjor
renka renkel renlo renmar renmi rennor renpel renquin renren renros rensil rentam rento rentonor
renul renva renvex renwen renwendor renyar renzen renzu rive river ro roads ros rosa rosbel
rosdor rosfi rosgan roshu rosjor roska roskato roskel roslo roslosil rosmar rosmi rosnor rospel
rosquin rosren rosrengan rosrenkel rosros rossil rost rostam rosto rosva rosvato rosvex roswen
rosyar roszen roszu s sil silbel sildor silfi silgan silhu siljor silka silkel sillo silmar
silmi silnor silpel silquin silren silros silsil siltam silto silul silva silver silvex silwen
silyar silzen silzendor silzenlo silzu sp spring st still sv sven t ta tam tambel tamdor tamfi
tamgan tamhu tamjor tamka tamkel tamlo tammar tammi tamnor tampel tamren tamros tamsil tamtam
tamto tamul tamvex tamwen tamyar tamzen tamzu tara th the there throu through to tobel todor
tofi togan tohu tojor toka tokel tolo tomar tomi tonor toquin tor tosil totam toto toul tova
tovex towenva toyar tozen tozenfi tozu tra trade travel travellers u ul uldor ulfi ulgan ulhu
uljor ulka ulkel ullo ulmar ulmi ulnor ulpel ulquin ulren ulros ulsil ultam ulto ulul ulva ulvex
ulvexpel ulvexros ulwen uly ulyar ulzen ulzu umar v va vabel vador vafi vahu vajor vaka vakel
valo vamar vami vanor vapel vaquingan var varen varos vasil vatam vato vaul vava vavato vavex
vawenquin vawenva vayar vazentam vazu ve vera vex vexbel vexfi vexgan vexhu vexjor vexka vexkel
vexlo vexmar vexmarka vexmi vexnor vexpel vexquin vexren vexros vexsil vextam vexto vexul vexva
vexvex vexvextam vexwen vexyar vexzen vexzu w was we wen wenbel wenfi wengan wenhu wenjor wenka
wenkel wenlo wenmar wenmi wennor wenpel wenquin wenren wenros wensil wentam wento wenul wenva
wenvex wenwen wenyar wenzen wenzu were wh what whi which white who wi wim win winters x y yar
yarbel yardor yarfi yargan yarhu yarjor yarka yarkel yarlo yarloros yarmar yarmi yarnor yarpel
yarquin yarren yarros yarsil yartam yarto yarul yarva yarvex yarvexfi yarwen yarzen yarzu ye
year yel yellow z zen zenbel zendor zenfi zengan zenhu zenjor zenka zenkel zenmar zenmi zennor
zenpel zenquin zenren zenros zensil zentam zento zenul zenva zenvex zenwen zenyar zenzen zenzu
zu zubel zudor zufi zugan zuhu zujor zuka zulo zumar zumi zunor zupel zuquin zuren zuros zusil
zutam zuto zuul zuva zuvex zuwen zuyar zuzen zuzu
"""
